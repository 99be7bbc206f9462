//! The cursors of `EMQ.QUEUES`: `0`, the last name a page returned, or `{<n>}`, a place this
//! node keeps after a name the page read but did not show.

use std::collections::BTreeMap;

use super::registry::Resume;
use crate::protocol::{EmqError, Queue};

/// A cursor of `EMQ.QUEUES`, as a client gives it.
#[derive(Debug, PartialEq, Eq)]
pub enum Cursor<'a> {
    /// `0`: from the first name.
    Start,
    /// A queue name: after it (`{0}` for the queue named `0`).
    After(&'a [u8]),
    /// `{<n>}`: a place this node keeps, after a name the page did not return.
    Kept(u64),
}

impl<'a> Cursor<'a> {
    /// `0`, a queue name (protocol.md §1.1), or a number in braces; anything else is `EMQCURSOR`.
    pub fn parse(bytes: &'a [u8]) -> Result<Cursor<'a>, EmqError> {
        if bytes == b"0" {
            return Ok(Cursor::Start);
        }
        if let Some(digits) = bytes.strip_prefix(b"{").and_then(|b| b.strip_suffix(b"}")) {
            let n = std::str::from_utf8(digits)
                .ok()
                .filter(|d| !d.is_empty() && d.bytes().all(|c| c.is_ascii_digit()))
                .and_then(|d| d.parse::<u64>().ok())
                .ok_or(EmqError::Cursor)?;
            return Ok(match n {
                0 => Cursor::After(b"0"),
                n => Cursor::Kept(n),
            });
        }
        Queue::parse(bytes)
            .map(|q| Cursor::After(q.as_bytes()))
            .ok_or(EmqError::Cursor)
    }
}

/// How many kept places a node holds; an older one is refused (`EMQCURSOR`).
const MAX_KEPT: usize = 1024;

/// The places kept for cursors `{<n>}`: pages that ended after a name they did not return,
/// which the cursor must not name.
#[derive(Default)]
pub struct Kept {
    next: u64,
    after: BTreeMap<u64, Vec<u8>>,
}

impl Kept {
    pub const fn new() -> Kept {
        Kept {
            next: 0,
            after: BTreeMap::new(),
        }
    }

    /// Numbers start from `base`, so that a cursor kept by an earlier run of the server (or
    /// by another node) names no place kept here.
    pub fn start_at(&mut self, base: u64) {
        self.after.clear();
        self.next = base.max(1);
    }

    /// Keeps the place after `name`; its number.
    pub fn keep(&mut self, name: Vec<u8>) -> u64 {
        let n = self.next.max(1);
        self.next = n.saturating_add(1);
        self.after.insert(n, name);
        while self.after.len() > MAX_KEPT {
            self.after.pop_first();
        }
        n
    }

    pub fn get(&self, n: u64) -> Option<&[u8]> {
        self.after.get(&n).map(Vec::as_slice)
    }

    pub fn clear(&mut self) {
        self.after.clear();
    }
}

/// The reply's cursor for where the next page starts (minting a kept place if need be).
pub fn render(resume: Resume, kept: &mut Kept) -> Vec<u8> {
    match resume {
        Resume::End => b"0".to_vec(),
        // The queue named `0` would read as the start.
        Resume::After(name) if name == b"0" => b"{0}".to_vec(),
        Resume::After(name) => name,
        Resume::Past(name) => format!("{{{}}}", kept.keep(name)).into_bytes(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cursors_are_zero_a_queue_name_or_a_kept_number() {
        assert_eq!(Cursor::parse(b"0"), Ok(Cursor::Start));
        assert_eq!(Cursor::parse(b"orders"), Ok(Cursor::After(b"orders")));
        assert_eq!(Cursor::parse(b"{0}"), Ok(Cursor::After(b"0")));
        assert_eq!(Cursor::parse(b"{42}"), Ok(Cursor::Kept(42)));
        for bad in [
            &b""[..],
            b"{}",
            b"{-1}",
            b"{4x}",
            b"{99999999999999999999}",
            b"a b",
            b"a}b",
            &[b'q'; 129],
        ] {
            assert_eq!(Cursor::parse(bad), Err(EmqError::Cursor), "{bad:?}");
        }
    }

    #[test]
    fn a_reply_cursor_names_the_last_name_shown_or_a_kept_place() {
        let mut kept = Kept::new();
        kept.start_at(1000);
        assert_eq!(render(Resume::End, &mut kept), b"0");
        assert_eq!(render(Resume::After(b"q".to_vec()), &mut kept), b"q");
        assert_eq!(render(Resume::After(b"0".to_vec()), &mut kept), b"{0}");
        assert_eq!(render(Resume::Past(b"hid".to_vec()), &mut kept), b"{1000}");
        assert_eq!(kept.get(1000), Some(&b"hid"[..]));
        for i in 0..MAX_KEPT {
            kept.keep(format!("q{i}").into_bytes());
        }
        assert_eq!(kept.get(1000), None, "the oldest place goes first");
        assert!(kept.get(1000 + MAX_KEPT as u64).is_some());
        kept.start_at(5000);
        assert_eq!(
            kept.get(1000 + MAX_KEPT as u64),
            None,
            "a new run keeps none"
        );
    }
}
