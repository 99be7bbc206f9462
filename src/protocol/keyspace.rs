//! The keyspace grammar (protocol.md §1): every key is `emq:{<queue>}:<type>`, composed here and
//! nowhere else. The type set is closed.

use super::{BrandedId, ID_LEN};

/// Longest queue name, in bytes (protocol.md §1.1).
pub const MAX_QUEUE_LEN: usize = 128;
/// What every per-queue key starts with: the protocol's prefix and the hashtag's brace.
pub const PREFIX: &[u8] = b"emq:{";
const JOB_TYPE: &[u8] = b"job";
const GROUP_TYPE: &[u8] = b"group";

/// A queue name that is a valid hashtag: 1–128 bytes of `0x21..=0x7E` without `{` or `}`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Queue<'a>(&'a [u8]);

/// Whether `name` is 1–128 bytes of `0x21..=0x7E` without `{` or `}`: a queue's or a group's.
fn is_name(name: &[u8]) -> bool {
    (1..=MAX_QUEUE_LEN).contains(&name.len())
        && name
            .iter()
            .all(|&b| (0x21..=0x7E).contains(&b) && b != b'{' && b != b'}')
}

/// A group's name (`EMQ.ENQUEUE ... GROUP`), under the queue name's rules.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Group<'a>(&'a [u8]);

impl<'a> Group<'a> {
    pub fn parse(name: &'a [u8]) -> Option<Self> {
        is_name(name).then_some(Self(name))
    }

    pub fn as_bytes(&self) -> &'a [u8] {
        self.0
    }
}

impl<'a> Queue<'a> {
    pub fn parse(name: &'a [u8]) -> Option<Self> {
        is_name(name).then_some(Self(name))
    }

    pub fn as_bytes(&self) -> &'a [u8] {
        self.0
    }
}

/// The closed set of per-queue key types.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KeyType {
    /// The ready set (zset, score 0).
    Pending,
    /// The claimed set (zset, score = lease deadline).
    Active,
    /// The delayed set (zset, score = due time).
    Schedule,
    /// Jobs that exhausted their attempts (zset, score = time of death).
    Dead,
    /// Per-queue facts (hash): the paused flag, the event stream's setting (protocol.md §9).
    Meta,
    /// The queue's transitions while its event stream is on (stream, capped; protocol.md §9).
    Events,
    /// The job row (hash); its key carries a branded id.
    Job,
    /// The claims of the rate limit's window (zset, member `<id>:<attempt>`, score = the time
    /// of the claim; protocol.md §9).
    Rate,
    /// The deduplication keys (hash: unique key -> the first job's id and its window's end;
    /// protocol.md §9).
    Unique,
    /// The repeating jobs (hash: name -> its schedule, payload and next firing; protocol.md §9).
    Cron,
    /// Parents waiting for their children (zset, score = the due time, 0 for none;
    /// protocol.md §10).
    Waiting,
    /// Finished children's hand-overs to parents out of reach (hash; protocol.md §10).
    Outbox,
    /// A named group's ready jobs (zset, scored as `pending`); its key carries the group's
    /// name.
    Group,
    /// The named groups with ready jobs, in turn order (zset, score = turn number).
    Turns,
    /// Counts beside the sets (hash: `pending`, the named groups' ready jobs; `active:<g>`,
    /// each group's active jobs).
    Tally,
    /// Limits of single groups (hash: `concurrency:<g>`).
    Quotas,
    /// Groups with ready jobs held back by their concurrency limit (zset, score = when held).
    Held,
    /// Paused groups (zset, score = when each resumes by itself; the largest i64 for never).
    Pauses,
    /// The named groups the queue knows: with ready or active jobs, a limit of their own or a
    /// pause (zset, score = minus the group's ready jobs, so the largest backlog comes first).
    Groups,
    /// The claims in the groups' rate windows (zset, member `<group> <id>:<attempt>@<ms>`, score =
    /// when the claim leaves its window).
    Windows,
}

impl KeyType {
    pub const ALL: [KeyType; 20] = [
        KeyType::Pending,
        KeyType::Active,
        KeyType::Schedule,
        KeyType::Dead,
        KeyType::Meta,
        KeyType::Events,
        KeyType::Job,
        KeyType::Rate,
        KeyType::Unique,
        KeyType::Cron,
        KeyType::Waiting,
        KeyType::Outbox,
        KeyType::Group,
        KeyType::Turns,
        KeyType::Tally,
        KeyType::Quotas,
        KeyType::Held,
        KeyType::Pauses,
        KeyType::Groups,
        KeyType::Windows,
    ];

    pub fn name(self) -> &'static str {
        match self {
            KeyType::Pending => "pending",
            KeyType::Active => "active",
            KeyType::Schedule => "schedule",
            KeyType::Dead => "dead",
            KeyType::Meta => "meta",
            KeyType::Events => "events",
            KeyType::Job => "job",
            KeyType::Rate => "rate",
            KeyType::Unique => "unique",
            KeyType::Cron => "cron",
            KeyType::Waiting => "waiting",
            KeyType::Outbox => "outbox",
            KeyType::Group => "group",
            KeyType::Turns => "turns",
            KeyType::Tally => "tally",
            KeyType::Quotas => "quotas",
            KeyType::Held => "held",
            KeyType::Pauses => "pauses",
            KeyType::Groups => "groups",
            KeyType::Windows => "windows",
        }
    }

    /// What follows the queue name in this type's key: `}:<type>` (`}:job:` for a row, whose
    /// id comes next, and `}:group:` for a group, whose name comes next).
    pub fn key_suffix(self) -> &'static [u8] {
        match self {
            KeyType::Pending => b"}:pending",
            KeyType::Active => b"}:active",
            KeyType::Schedule => b"}:schedule",
            KeyType::Dead => b"}:dead",
            KeyType::Meta => b"}:meta",
            KeyType::Events => b"}:events",
            KeyType::Job => b"}:job:",
            KeyType::Rate => b"}:rate",
            KeyType::Unique => b"}:unique",
            KeyType::Cron => b"}:cron",
            KeyType::Waiting => b"}:waiting",
            KeyType::Outbox => b"}:outbox",
            KeyType::Group => b"}:group:",
            KeyType::Turns => b"}:turns",
            KeyType::Tally => b"}:tally",
            KeyType::Quotas => b"}:quotas",
            KeyType::Held => b"}:held",
            KeyType::Pauses => b"}:pauses",
            KeyType::Groups => b"}:groups",
            KeyType::Windows => b"}:windows",
        }
    }

    /// Whether the type's key names something beyond the queue (a row's id, a group's name).
    pub fn is_named(self) -> bool {
        matches!(self, KeyType::Job | KeyType::Group)
    }

    /// Whether the timer visits a queue while it has this key: due jobs and expired leases,
    /// the dead set's retention, the rate window's claims, windows of unique keys that end,
    /// and repeating jobs that fire.
    pub fn is_timed(self) -> bool {
        matches!(
            self,
            KeyType::Schedule
                | KeyType::Active
                | KeyType::Dead
                | KeyType::Rate
                | KeyType::Unique
                | KeyType::Cron
                | KeyType::Pauses
                | KeyType::Windows
        )
    }

    /// The exact, lower-case type name; anything else is not in the grammar.
    pub fn parse(name: &[u8]) -> Option<Self> {
        Self::ALL.into_iter().find(|t| t.name().as_bytes() == name)
    }
}

/// Longest key the grammar composes: `emq:{` + 128-byte queue + `}:job:` + 14-byte id.
pub const MAX_KEY_LEN: usize = PREFIX.len() + MAX_QUEUE_LEN + 6 + 14;

/// A composed key on the stack, so the hot paths build keys without allocating.
#[derive(Clone, Copy)]
pub struct KeyBuf {
    buf: [u8; MAX_KEY_LEN],
    len: usize,
}

impl KeyBuf {
    fn push(&mut self, bytes: &[u8]) {
        // Every production fits MAX_KEY_LEN by construction (the queue is at most 128 bytes).
        let end = (self.len + bytes.len()).min(MAX_KEY_LEN);
        let n = end - self.len;
        self.buf[self.len..end].copy_from_slice(&bytes[..n]);
        self.len = end;
    }

    /// `emq:{<queue>}:<type>`, the per-queue production. `KeyType::Job` gets `job:` only;
    /// use [`KeyBuf::job`] for a row key.
    pub fn queue(queue: Queue<'_>, ty: KeyType) -> Self {
        let mut k = KeyBuf {
            buf: [0; MAX_KEY_LEN],
            len: 0,
        };
        k.push(PREFIX);
        k.push(queue.as_bytes());
        k.push(ty.key_suffix());
        k
    }

    /// `emq:{<queue>}:job:<id>`, the job-row production. The id is gated by its type.
    pub fn job(queue: Queue<'_>, id: &BrandedId) -> Self {
        RowPrefix::new(queue).row(id)
    }

    pub fn as_bytes(&self) -> &[u8] {
        &self.buf[..self.len]
    }
}

/// `emq:{<queue>}:job:`, composed once for the many row keys of a batch.
#[derive(Clone, Copy)]
pub struct RowPrefix(KeyBuf);

impl RowPrefix {
    pub fn new(queue: Queue<'_>) -> Self {
        Self(KeyBuf::queue(queue, KeyType::Job))
    }

    /// `emq:{<queue>}:job:` itself, which every row key of the queue starts with.
    pub fn as_bytes(&self) -> &[u8] {
        self.0.as_bytes()
    }

    /// The row key of `id`.
    pub fn row(&self, id: &BrandedId) -> KeyBuf {
        self.row_text(&id.encode())
    }

    /// The row key of `id` as a client gave it, `arg`: a well-formed id is canonical (parsing
    /// and encoding are inverse), so the argument it parsed from is its encoding and need not
    /// be made again.
    pub fn row_arg(&self, id: &BrandedId, arg: &[u8]) -> KeyBuf {
        match <&[u8; ID_LEN]>::try_from(arg) {
            Ok(text) => self.row_text(text),
            Err(_) => self.row(id),
        }
    }

    fn row_text(&self, id: &[u8; ID_LEN]) -> KeyBuf {
        let mut k = self.0;
        k.push(id);
        k
    }
}

/// `emq:{<queue>}:<type>`, the per-queue production.
pub fn queue_key(queue: Queue<'_>, ty: KeyType) -> Vec<u8> {
    KeyBuf::queue(queue, ty).as_bytes().to_vec()
}

/// `emq:{<queue>}:group:<group>`, a named group's production.
pub fn group_key(queue: Queue<'_>, group: Group<'_>) -> Vec<u8> {
    let mut key = queue_key(queue, KeyType::Group);
    key.extend_from_slice(group.as_bytes());
    key
}

/// `emq:{<queue>}:job:<id>`, the job-row production.
pub fn job_key(queue: Queue<'_>, id: &BrandedId) -> Vec<u8> {
    KeyBuf::job(queue, id).as_bytes().to_vec()
}

/// A key read back through the grammar.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Decoded<'a> {
    /// A per-queue key, with its id when it is a job row and its name when it is a group's.
    Queue {
        queue: Queue<'a>,
        ty: KeyType,
        id: Option<BrandedId>,
        group: Option<Group<'a>>,
    },
    /// A deployment-scoped key under the `{emq}` reserve: `version` or `locks`.
    Deployment { name: &'static str },
}

/// Reads a key through the grammar; `None` when the key is outside it (never guessed).
pub fn decode(key: &[u8]) -> Option<Decoded<'_>> {
    if let Some(name) = key.strip_prefix(b"{emq}:") {
        for reserved in ["version", "locks"] {
            if name == reserved.as_bytes() {
                return Some(Decoded::Deployment { name: reserved });
            }
        }
        return None;
    }
    let rest = key.strip_prefix(PREFIX)?;
    let close = rest.iter().position(|&b| b == b'}')?;
    let queue = Queue::parse(&rest[..close])?;
    let ty_part = rest[close + 1..].strip_prefix(b":")?;
    if let Some(id_part) = ty_part
        .strip_prefix(JOB_TYPE)
        .and_then(|r| r.strip_prefix(b":"))
    {
        let id = BrandedId::parse(id_part)?;
        return Some(Decoded::Queue {
            queue,
            ty: KeyType::Job,
            id: Some(id),
            group: None,
        });
    }
    if let Some(name) = ty_part
        .strip_prefix(GROUP_TYPE)
        .and_then(|r| r.strip_prefix(b":"))
    {
        return Some(Decoded::Queue {
            queue,
            ty: KeyType::Group,
            id: None,
            group: Some(Group::parse(name)?),
        });
    }
    let ty = KeyType::parse(ty_part).filter(|t| !t.is_named())?;
    Some(Decoded::Queue {
        queue,
        ty,
        id: None,
        group: None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::slot::slot;

    fn q(name: &str) -> Queue<'_> {
        Queue::parse(name.as_bytes()).expect("valid queue")
    }

    #[test]
    fn the_parts_map() {
        // F1: the map the seeds' transcript asserts.
        assert_eq!(
            queue_key(q("orders"), KeyType::Pending),
            b"emq:{orders}:pending"
        );
        let ord = BrandedId::parse(b"ORD0NgWEfAEJfs").expect("id");
        let row = job_key(q("orders"), &ord);
        assert_eq!(row, b"emq:{orders}:job:ORD0NgWEfAEJfs");
        assert_eq!(
            row.len() - 14,
            17,
            "17 bytes of grammar before the identity"
        );
    }

    #[test]
    fn each_key_suffix_spells_its_type_name() {
        for ty in KeyType::ALL {
            let row = if ty.is_named() { ":" } else { "" };
            let want = format!("}}:{}{row}", ty.name());
            assert_eq!(ty.key_suffix(), want.as_bytes());
        }
    }

    #[test]
    fn every_type_composes() {
        for (ty, key) in [
            (KeyType::Pending, &b"emq:{q}:pending"[..]),
            (KeyType::Active, b"emq:{q}:active"),
            (KeyType::Schedule, b"emq:{q}:schedule"),
            (KeyType::Dead, b"emq:{q}:dead"),
            (KeyType::Meta, b"emq:{q}:meta"),
            (KeyType::Events, b"emq:{q}:events"),
        ] {
            assert_eq!(queue_key(q("q"), ty), key);
            assert_eq!(KeyType::parse(ty.name().as_bytes()), Some(ty));
        }
        assert_eq!(KeyType::parse(b"PENDING"), None);
        assert_eq!(KeyType::parse(b"ready"), None);
    }

    #[test]
    fn the_longest_key_fits_the_stack_buffer() {
        let long = [b'q'; MAX_QUEUE_LEN];
        let id = BrandedId::parse(b"JOBAzL8n0Y58m7").expect("id");
        let key = job_key(Queue::parse(&long).expect("queue"), &id);
        assert_eq!(key.len(), MAX_KEY_LEN);
        assert!(key.ends_with(b"}:job:JOBAzL8n0Y58m7"));
        let schedule = queue_key(Queue::parse(&long).expect("queue"), KeyType::Schedule);
        assert!(schedule.ends_with(b"}:schedule"));
    }

    #[test]
    fn queue_name_rules() {
        assert!(Queue::parse(b"orders").is_some());
        assert!(Queue::parse(&[b'a'; 128]).is_some());
        assert!(Queue::parse(b"!~").is_some());
        for bad in [
            &b""[..],
            &[b'a'; 129],
            b"a b",
            b"a{b",
            b"a}b",
            b"tab\there",
            b"caf\xc3\xa9",
            b"nul\0",
            b"\x7f",
        ] {
            assert!(Queue::parse(bad).is_none(), "{bad:?}");
        }
    }

    #[test]
    fn decode_reads_the_workshop_key() {
        let key = b"emq:{quotes}:job:JOB0KHTOWnGLuC";
        let Some(Decoded::Queue { queue, ty, id, .. }) = decode(key) else {
            panic!("in grammar")
        };
        assert_eq!(queue.as_bytes(), b"quotes");
        assert_eq!(ty, KeyType::Job);
        assert_eq!(id.map(|i| i.kind()), Some(*b"JOB"));
        assert_eq!(slot(key), 3378);
    }

    #[test]
    fn decode_round_trips_every_production() {
        let id = BrandedId::parse(b"JOB0KHTOWnGLuC").expect("id");
        let tenant = Group::parse(b"acme-7").expect("group");
        for ty in KeyType::ALL {
            let key = match ty {
                KeyType::Job => job_key(q("fills"), &id),
                KeyType::Group => group_key(q("fills"), tenant),
                _ => queue_key(q("fills"), ty),
            };
            let Some(Decoded::Queue { queue, ty: got, .. }) = decode(&key) else {
                panic!("{key:?} decodes")
            };
            assert_eq!(queue.as_bytes(), b"fills");
            assert_eq!(got, ty);
        }
        assert_eq!(
            decode(b"{emq}:version"),
            Some(Decoded::Deployment { name: "version" })
        );
    }

    #[test]
    fn decode_refuses_keys_outside_the_grammar() {
        for bad in [
            &b"emq:{orders}:job:12345678901234"[..],
            b"emq:{orders}:job:",
            b"emq:{orders}:job",
            b"emq:{orders}:pending:x",
            b"emq:{orders}:group:",
            b"emq:{orders}:group",
            b"emq:{orders}:group:a b",
            b"emq:{orders}:group:a{b",
            b"emq:{orders}:bogus",
            b"emq:{}:pending",
            b"emq:{orders:pending",
            b"emq:orders:pending",
            b"EMQ:{orders}:pending",
            b"emq:{a b}:pending",
            b"emq:{orders}pending",
            b"{emq}:other",
            b"",
        ] {
            assert_eq!(decode(bad), None, "{}", String::from_utf8_lossy(bad));
        }
    }
}
