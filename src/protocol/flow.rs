//! Flows (protocol.md §10, docs/flows.md): a parent that waits for its children. The words a
//! flow writes: a child's `parents` field, a parent's `child:<queue>:<id>` fields, and the
//! outbox's entries, each composed and parsed here and nowhere else.

use super::branded_id::{BrandedId, LEN as ID_LEN};
use super::keyspace::Queue;

/// Most parents one child names.
pub const MAX_PARENTS: usize = 16;
/// Most children one parent waits for.
pub const MAX_CHILDREN: i64 = 100_000;
/// What every child field of a parent's row starts with.
pub const CHILD_PREFIX: &[u8] = b"child:";

/// What a parent does when a child of its dies or is cancelled.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Policy {
    /// The parent goes to `dead`, naming the child (the default).
    Fail,
    /// The child counts as finished, marked as failed.
    Ignore,
}

impl Policy {
    pub fn as_bytes(self) -> &'static [u8] {
        match self {
            Policy::Fail => b"fail",
            Policy::Ignore => b"ignore",
        }
    }

    /// `fail` or `ignore`, in any case (`ON-FAIL FAIL`, or an outbox entry's word).
    pub fn parse(word: &[u8]) -> Option<Self> {
        if word.eq_ignore_ascii_case(b"fail") {
            Some(Policy::Fail)
        } else if word.eq_ignore_ascii_case(b"ignore") {
            Some(Policy::Ignore)
        } else {
            None
        }
    }
}

/// How a child finished, or that it has not.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// Registered with its parent, not finished.
    Waiting,
    Acked,
    /// Its last attempt failed, or its lease ran out on it.
    Dead,
    Cancelled,
}

impl Outcome {
    pub fn as_bytes(self) -> &'static [u8] {
        match self {
            Outcome::Waiting => b"waiting",
            Outcome::Acked => b"acked",
            Outcome::Dead => b"dead",
            Outcome::Cancelled => b"cancelled",
        }
    }

    /// A finished outcome's word (`waiting` is not one).
    pub fn parse_finished(word: &[u8]) -> Option<Self> {
        [Outcome::Acked, Outcome::Dead, Outcome::Cancelled]
            .into_iter()
            .find(|o| o.as_bytes().eq_ignore_ascii_case(word))
    }

    /// Whether it fails a parent whose policy is `fail`.
    pub fn failed(self) -> bool {
        matches!(self, Outcome::Dead | Outcome::Cancelled)
    }
}

/// One parent a child names: its queue, its id, and what a failure of the child does to it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ParentRef {
    pub queue: Vec<u8>,
    pub id: BrandedId,
    pub policy: Policy,
}

/// A child's `parents` field: one line per parent, `<queue> <id> <fail|ignore>`, joined by
/// `\n` (a queue name holds neither a space nor a newline, protocol.md §1.1).
pub fn write_parents(parents: &[ParentRef]) -> Vec<u8> {
    let mut out = Vec::new();
    for (i, p) in parents.iter().enumerate() {
        if i > 0 {
            out.push(b'\n');
        }
        out.extend_from_slice(&p.queue);
        out.push(b' ');
        out.extend_from_slice(&p.id.encode());
        out.push(b' ');
        out.extend_from_slice(p.policy.as_bytes());
    }
    out
}

/// The parents a `parents` field names; a line outside the form (written by hand) is skipped.
pub fn read_parents(field: &[u8]) -> Vec<ParentRef> {
    field
        .split(|&b| b == b'\n')
        .filter_map(|line| {
            let mut words = line.split(|&b| b == b' ');
            let queue = Queue::parse(words.next()?)?;
            let id = BrandedId::parse(words.next()?)?;
            let policy = Policy::parse(words.next()?)?;
            words.next().is_none().then(|| ParentRef {
                queue: queue.as_bytes().to_vec(),
                id,
                policy,
            })
        })
        .collect()
}

/// A parent's field for one child: `child:<queue>:<id>`.
pub fn child_field(queue: &[u8], id: &BrandedId) -> Vec<u8> {
    let mut out = Vec::with_capacity(CHILD_PREFIX.len() + queue.len() + 1 + ID_LEN);
    out.extend_from_slice(CHILD_PREFIX);
    out.extend_from_slice(queue);
    out.push(b':');
    out.extend_from_slice(&id.encode());
    out
}

/// The child a parent's field names; `None` for any other field.
pub fn read_child_field(field: &[u8]) -> Option<(Queue<'_>, BrandedId)> {
    let rest = field.strip_prefix(CHILD_PREFIX)?;
    let split = rest.len().checked_sub(ID_LEN + 1)?;
    let (queue, id) = (&rest[..split], &rest[split..]);
    let id = id.strip_prefix(b":")?;
    Some((Queue::parse(queue)?, BrandedId::parse(id)?))
}

/// A child field's value: `waiting`, or `<outcome>:<data>` once finished.
pub fn child_value(outcome: Outcome, data: &[u8]) -> Vec<u8> {
    let word = outcome.as_bytes();
    if outcome == Outcome::Waiting {
        return word.to_vec();
    }
    let mut out = Vec::with_capacity(word.len() + 1 + data.len());
    out.extend_from_slice(word);
    out.push(b':');
    out.extend_from_slice(data);
    out
}

/// A child field's value read back: its outcome and data (`Waiting` for anything else).
pub fn read_child_value(value: &[u8]) -> (Outcome, &[u8]) {
    let (word, data) = match value.iter().position(|&b| b == b':') {
        Some(at) => (&value[..at], &value[at + 1..]),
        None => (value, &value[value.len()..]),
    };
    match Outcome::parse_finished(word) {
        Some(outcome) => (outcome, data),
        None => (Outcome::Waiting, &value[value.len()..]),
    }
}

/// One finished child on its way to one parent.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Delivery {
    pub child_queue: Vec<u8>,
    pub child: BrandedId,
    pub parent: ParentRef,
    pub outcome: Outcome,
    /// The child's result (acked) or error text.
    pub data: Vec<u8>,
}

impl Delivery {
    /// Its outbox field: `<child-id>:<parent-id>:<parent-queue>` (both ids 14 bytes).
    pub fn outbox_field(&self) -> Vec<u8> {
        outbox_field(&self.child, &self.parent.id, &self.parent.queue)
    }

    /// Its outbox value: `<outcome>:<policy>:<data>`.
    pub fn outbox_value(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(16 + self.data.len());
        out.extend_from_slice(self.outcome.as_bytes());
        out.push(b':');
        out.extend_from_slice(self.parent.policy.as_bytes());
        out.push(b':');
        out.extend_from_slice(&self.data);
        out
    }

    /// An outbox entry of `child_queue` read back; `None` for one outside the form.
    pub fn from_outbox(child_queue: &[u8], field: &[u8], value: &[u8]) -> Option<Self> {
        if field.len() < 2 * ID_LEN + 3 || field[ID_LEN] != b':' || field[2 * ID_LEN + 1] != b':' {
            return None;
        }
        let child = BrandedId::parse(&field[..ID_LEN])?;
        let parent = BrandedId::parse(&field[ID_LEN + 1..2 * ID_LEN + 1])?;
        let queue = Queue::parse(&field[2 * ID_LEN + 2..])?;
        let mut parts = value.splitn(3, |&b| b == b':');
        let outcome = Outcome::parse_finished(parts.next()?)?;
        let policy = Policy::parse(parts.next()?)?;
        let data = parts.next()?.to_vec();
        Some(Delivery {
            child_queue: child_queue.to_vec(),
            child,
            parent: ParentRef {
                queue: queue.as_bytes().to_vec(),
                id: parent,
                policy,
            },
            outcome,
            data,
        })
    }
}

/// An outbox field: `<child-id>:<parent-id>:<parent-queue>`.
pub fn outbox_field(child: &BrandedId, parent: &BrandedId, parent_queue: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(2 * ID_LEN + 2 + parent_queue.len());
    out.extend_from_slice(&child.encode());
    out.push(b':');
    out.extend_from_slice(&parent.encode());
    out.push(b':');
    out.extend_from_slice(parent_queue);
    out
}

/// The error a parent dies with when a child of its fails it.
pub fn failed_by(child_queue: &[u8], child: &BrandedId, outcome: Outcome, data: &[u8]) -> Vec<u8> {
    let mut out = b"child ".to_vec();
    out.extend_from_slice(child_queue);
    out.push(b' ');
    out.extend_from_slice(&child.encode());
    out.push(b' ');
    out.extend_from_slice(outcome.as_bytes());
    if !data.is_empty() {
        out.extend_from_slice(b": ");
        out.extend_from_slice(data);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(text: &str) -> BrandedId {
        BrandedId::parse(text.as_bytes()).expect("id")
    }

    #[test]
    fn parents_round_trip_and_hand_written_lines_are_skipped() {
        let parents = vec![
            ParentRef {
                queue: b"a:b".to_vec(),
                id: id("JOB0KHTOWnGLuC"),
                policy: Policy::Fail,
            },
            ParentRef {
                queue: b"albums".to_vec(),
                id: id("JOB0KHTOWnGLuD"),
                policy: Policy::Ignore,
            },
        ];
        let field = write_parents(&parents);
        assert_eq!(
            field,
            b"a:b JOB0KHTOWnGLuC fail\nalbums JOB0KHTOWnGLuD ignore".to_vec()
        );
        assert_eq!(read_parents(&field), parents);
        let mut bad = field.clone();
        bad.extend_from_slice(
            b"\nq notanid fail\nq JOB0KHTOWnGLuC maybe\n\nq JOB0KHTOWnGLuC fail x",
        );
        assert_eq!(read_parents(&bad), parents);
    }

    #[test]
    fn child_fields_name_their_child_and_nothing_else() {
        let f = child_field(b"img:1", &id("JOB0KHTOWnGLuC"));
        assert_eq!(f, b"child:img:1:JOB0KHTOWnGLuC".to_vec());
        let (q, i) = read_child_field(&f).expect("a child field");
        assert_eq!((q.as_bytes(), i), (&b"img:1"[..], id("JOB0KHTOWnGLuC")));
        for other in [
            &b"state"[..],
            b"child:",
            b"child:JOB0KHTOWnGLuC",
            b"child::JOB0KHTOWnGLuC",
            b"child:q-JOB0KHTOWnGLuC",
            b"children",
        ] {
            assert_eq!(read_child_field(other), None, "{other:?}");
        }
    }

    #[test]
    fn child_values_keep_their_data_byte_for_byte() {
        assert_eq!(child_value(Outcome::Waiting, b"x"), b"waiting".to_vec());
        let v = child_value(Outcome::Acked, b"a:b\r\n\0");
        assert_eq!(read_child_value(&v), (Outcome::Acked, &b"a:b\r\n\0"[..]));
        assert_eq!(read_child_value(b"waiting"), (Outcome::Waiting, &b""[..]));
        assert_eq!(
            read_child_value(b"cancelled:"),
            (Outcome::Cancelled, &b""[..])
        );
        assert_eq!(read_child_value(b"bogus:x"), (Outcome::Waiting, &b""[..]));
    }

    #[test]
    fn outbox_entries_round_trip() {
        let d = Delivery {
            child_queue: b"thumbs".to_vec(),
            child: id("JOB0KHTOWnGLuC"),
            parent: ParentRef {
                queue: b"al:bums".to_vec(),
                id: id("JOB0KHTOWnGLuD"),
                policy: Policy::Ignore,
            },
            outcome: Outcome::Dead,
            data: b"boom: a:b".to_vec(),
        };
        let (f, v) = (d.outbox_field(), d.outbox_value());
        assert_eq!(f, b"JOB0KHTOWnGLuC:JOB0KHTOWnGLuD:al:bums".to_vec());
        assert_eq!(v, b"dead:ignore:boom: a:b".to_vec());
        assert_eq!(Delivery::from_outbox(b"thumbs", &f, &v), Some(d));
        assert_eq!(Delivery::from_outbox(b"thumbs", b"short", &v), None);
        assert_eq!(Delivery::from_outbox(b"thumbs", &f, b"waiting:fail:"), None);
    }

    #[test]
    fn a_parent_failed_by_a_child_names_it() {
        let e = failed_by(b"thumbs", &id("JOB0KHTOWnGLuC"), Outcome::Dead, b"boom");
        assert_eq!(e, b"child thumbs JOB0KHTOWnGLuC dead: boom".to_vec());
        let e = failed_by(b"t", &id("JOB0KHTOWnGLuC"), Outcome::Cancelled, b"");
        assert_eq!(e, b"child t JOB0KHTOWnGLuC cancelled".to_vec());
    }
}
