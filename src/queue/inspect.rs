//! Inspection, for operators and consoles: one job as its row and its set show it
//! (`EMQ.JOB`), and one set read a page at a time in its order (`EMQ.JOBS`). Reads only;
//! the caller's read permission is checked on every key read, before it is read.
//!
//! A set's order is by score, then member bytes. A page resumes strictly after the (score,
//! member) its cursor names, found by counting the members below that score and then
//! binary-searching ranks in the run of members that share it, so a page costs O(log N)
//! probes wherever it starts, even in a pending set whose million members all score 0. A job
//! that stays in the set at its score is returned exactly once on a walk from cursor `0` back
//! to `0`, whatever is added or removed between pages; only a job that moved (left and came
//! back, or changed score) may be missed or seen twice.

use crate::protocol::job::attempts_from;
use crate::protocol::{EmqError, Field, Holds, KeyRef, Ranked, Set};

use super::{checked_rows, ready, Job};

/// Jobs in a page when `COUNT` is not given.
pub const DEFAULT_COUNT: usize = 100;
/// The most jobs a page may ask for.
pub const MAX_COUNT: i64 = 1000;

/// The row fields a job's view shows, in this order, each where the row has it.
pub const ROW_FIELDS: [Field; Field::ALL.len()] = Field::ALL;

/// The sets a job's view looks in, and `EMQ.JOBS` pages: the four of protocol.md §1, and the
/// waiting parents (docs/flows.md).
pub const VIEWED: [Set; 5] = [
    Set::Pending,
    Set::Active,
    Set::Schedule,
    Set::Dead,
    Set::Waiting,
];

/// A set by the name a client gives it (`EMQSET` otherwise). Users say `scheduled` for the
/// `schedule` key, as the row's state and `EMQ.STATS` do.
pub fn set_named(word: &[u8]) -> Result<Set, EmqError> {
    VIEWED
        .into_iter()
        .find(|set| set_word(*set).as_bytes() == word)
        .ok_or(EmqError::Set)
}

/// A set's name in replies.
pub fn set_word(set: Set) -> &'static str {
    match set {
        Set::Pending => "pending",
        Set::Active => "active",
        Set::Schedule => "scheduled",
        Set::Dead => "dead",
        Set::Rate => "rate",
        Set::Waiting => "waiting",
        Set::Turns => "turns",
        Set::Held => "held",
        Set::Pauses => "pauses",
        Set::Groups => "groups",
        Set::Windows => "windows",
    }
}

/// What a job's score in `set` means, as its view names it (unix ms); `None` for pending,
/// whose scores are all 0.
pub fn score_name(set: Set) -> Option<&'static str> {
    match set {
        Set::Pending => None,
        Set::Active => Some("lease-deadline"),
        Set::Schedule => Some("due"),
        Set::Dead => Some("died-at"),
        Set::Rate => Some("claimed-at"),
        Set::Waiting => Some("due"),
        Set::Turns => Some("turn"),
        Set::Held => Some("held-at"),
        Set::Pauses => Some("until"),
        Set::Groups => Some("backlog"),
        Set::Windows => Some("leaves-at"),
    }
}

/// A row field's name in a job's view.
pub fn field_name(field: Field) -> &'static str {
    match field {
        Field::State => "state",
        Field::Attempts => "attempts",
        Field::Payload => "payload",
        Field::Error => "error",
        Field::Result => "result",
        Field::Progress => "progress",
        Field::Priority => "priority",
        Field::Unique => "unique",
        Field::Cron => "cron",
        Field::Fence => "fence",
        Field::Children => "children",
        Field::Adopted => "adopted",
        Field::Finished => "finished",
        Field::Parents => "parents",
        Field::Orphan => "orphan",
        Field::Cancelled => "cancelled",
        Field::Timeout => "timeout",
        Field::Deadline => "deadline",
        Field::TimedOut => "timedout",
        Field::Group => "group",
        Field::Headers => "headers",
        Field::Ready => "ready",
    }
}

/// A score as a reply shows it.
#[derive(Debug, PartialEq)]
pub enum Score {
    /// A whole number of ms, as EchoMQ writes every score.
    Int(i64),
    /// A score written by hand that is not one (`1.5`, `inf`), as text that parses back to it.
    Text(String),
}

pub fn show_score(score: f64) -> Score {
    // Whole numbers inside i64's range: from -2^63 up to, not including, 2^63.
    let bound = -(i64::MIN as f64);
    if score.fract() == 0.0 && (-bound..bound).contains(&score) {
        Score::Int(score as i64)
    } else {
        Score::Text(format!("{score}"))
    }
}

// ---- the cursor -----------------------------------------------------------------------------

/// Where a page starts: at the beginning (`0`), or strictly after a (score, member).
///
/// The text is `<score>:<member>`: the score as the shortest decimal that reads back as the
/// same double (`1718000000000`, `0`, `-0`, `1.5`, `inf`, `-inf`), then the member's bytes.
/// A score in any other spelling (`01`, `1e3`, `+1`, `nan`) is refused, so each position has
/// exactly one cursor. The reply's cursor `0` is the end of the set.
#[derive(Clone, Debug, PartialEq)]
pub enum Cursor {
    Start,
    After { score: f64, member: Vec<u8> },
}

/// The cursor of the start, and of the end in a reply.
pub const START: &[u8] = b"0";

impl Cursor {
    /// A cursor a client sent: `0`, or one a reply gave (`EMQCURSOR` otherwise).
    pub fn parse(text: &[u8]) -> Result<Cursor, EmqError> {
        if text == START {
            return Ok(Cursor::Start);
        }
        let colon = text
            .iter()
            .position(|&b| b == b':')
            .ok_or(EmqError::Cursor)?;
        let (score, member) = (&text[..colon], &text[colon + 1..]);
        let score = std::str::from_utf8(score)
            .ok()
            .and_then(|s| s.parse::<f64>().ok().filter(|v| format!("{v}") == s))
            .filter(|v| !v.is_nan())
            .ok_or(EmqError::Cursor)?;
        Ok(Cursor::After {
            score,
            member: member.to_vec(),
        })
    }

    /// The text of the cursor that resumes after (score, member).
    pub fn encode(score: f64, member: &[u8]) -> Vec<u8> {
        let mut text = format!("{score}:").into_bytes();
        text.extend_from_slice(member);
        text
    }
}

/// Whether (score, member) comes after (after_score, after_member) in a set's order. Scores
/// compare as the server compares them (`-0` equals `0`).
fn is_after(score: f64, member: &[u8], after_score: f64, after_member: &[u8]) -> bool {
    score > after_score || (score == after_score && member > after_member)
}

/// The rank of the first member of an open set after (score, member): the members below the
/// score are counted (one probe), then those at it are binary-searched by rank, which gives
/// them in byte order (one probe per halving). Bounded work however many share the score.
pub fn resume_rank<S: Ranked>(
    store: &S,
    set: Set,
    score: f64,
    member: &[u8],
) -> Result<u64, EmqError> {
    let mut low = store.count_below(set, score, false)?;
    let mut high = store.count_below(set, score, true)?;
    while low < high {
        let mid = low + (high - low) / 2;
        let after = match store.range_by_rank(set, mid, mid)?.first() {
            Some((m, s)) => is_after(*s, store.bytes(m), score, member),
            None => true,
        };
        if after {
            high = mid;
        } else {
            low = mid + 1;
        }
    }
    Ok(low)
}

// ---- EMQ.JOB --------------------------------------------------------------------------------

/// One job as `EMQ.JOB` shows it.
pub struct View<T> {
    /// The row's fields among [`ROW_FIELDS`], in that order, each where the row has it.
    pub row: Vec<(Field, T)>,
    /// The set that holds the job (the first of pending, active, scheduled, dead, waiting), and its
    /// score there.
    pub place: Option<(Set, f64)>,
}

/// The view of `job`, after checking the caller may read the queue's four sets and the row;
/// `None` when the job has no row and no set holds it. A row of another type is `WRONGTYPE`.
pub fn job<S: Ranked>(store: &S, job: &Job<'_, S>) -> Result<Option<View<S::Text>>, EmqError> {
    let name = store.row_name(&job.id, job.member)?;
    store.check_access(&[
        KeyRef::Set(Set::Pending),
        KeyRef::Set(Set::Active),
        KeyRef::Set(Set::Schedule),
        KeyRef::Set(Set::Dead),
        KeyRef::Set(Set::Waiting),
        KeyRef::Row(&name),
    ])?;
    store.open_sets(&VIEWED)?;
    let place = VIEWED
        .into_iter()
        .find_map(|set| store.score(set, job.member).map(|score| (set, score)));
    let row = store.read_row(&name)?;
    // A ready job of a named group waits in the group's key: pending all the same.
    let place = match (place, store.holds(&row)) {
        (None, Holds::Hash) => {
            ready::waits_in(store, &row, job.member)?.map(|(_, score)| (Set::Pending, score))
        }
        (place, _) => place,
    };
    let fields = match store.holds(&row) {
        Holds::Nothing if place.is_none() => return Ok(None),
        Holds::Nothing => Vec::new(),
        Holds::Hash => ROW_FIELDS
            .into_iter()
            .filter_map(|field| store.field(&row, field).map(|value| (field, value)))
            .collect(),
        Holds::Zset | Holds::Stream | Holds::Other => return Err(EmqError::WrongType),
    };
    Ok(Some(View { row: fields, place }))
}

// ---- EMQ.JOBS -------------------------------------------------------------------------------

/// Most bytes of a payload or an error `EMQ.JOBS ... PREVIEW` shows.
pub const MAX_PREVIEW: i64 = 65_536;

/// One job of a page.
pub struct Entry<T> {
    pub member: T,
    pub score: f64,
    /// The row's `attempts` (as a claim reads it); `None` when the row or the field is missing.
    pub attempts: Option<i64>,
    /// With payloads only: the row's `payload` and `error`, each `None` where missing.
    pub payload: Option<T>,
    pub error: Option<T>,
}

/// One page of a set.
pub struct Page<T> {
    /// The cursor of the next page; `None` when this page reached the end (cursor `0`).
    pub next: Option<Vec<u8>>,
    pub jobs: Vec<Entry<T>>,
}

/// Up to `count` jobs of `set` after `cursor`, in the set's order, after checking the caller
/// may read the set and every row the page reads. A member outside the grammar (written by
/// hand) is listed with no row; a row of another type is `WRONGTYPE`.
pub fn page<S: Ranked>(
    store: &S,
    set: Set,
    cursor: &Cursor,
    count: usize,
    with_payloads: bool,
) -> Result<Page<S::Text>, EmqError> {
    store.check_access(&[KeyRef::Set(set)])?;
    store.open_sets(&[set])?;
    let len = store.len(set);
    let start = match cursor {
        Cursor::Start => 0,
        Cursor::After { score, member } => resume_rank(store, set, *score, member)?,
    };
    if count == 0 || start >= len {
        return Ok(Page {
            next: None,
            jobs: Vec::new(),
        });
    }
    let members = store.range_by_rank(set, start, start + count as u64 - 1)?;
    let names = checked_rows(store, &members)?;
    let mut jobs = Vec::with_capacity(members.len());
    for ((member, score), name) in members.into_iter().zip(&names) {
        let mut entry = Entry {
            member,
            score,
            attempts: None,
            payload: None,
            error: None,
        };
        if let Some((_, name)) = name {
            let row = store.read_row(name)?;
            match store.holds(&row) {
                Holds::Nothing => {}
                Holds::Hash => {
                    entry.attempts = store
                        .field(&row, Field::Attempts)
                        .map(|a| attempts_from(Some(store.bytes(&a))));
                    if with_payloads {
                        entry.payload = store.field(&row, Field::Payload);
                        entry.error = store.field(&row, Field::Error);
                    }
                }
                Holds::Zset | Holds::Stream | Holds::Other => return Err(EmqError::WrongType),
            }
        }
        jobs.push(entry);
    }
    let more = jobs.len() == count && start + (count as u64) < len;
    let next = match jobs.last() {
        Some(last) if more => Some(Cursor::encode(last.score, store.bytes(&last.member))),
        _ => None,
    };
    Ok(Page { next, jobs })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::BrandedId;
    use crate::queue::memory::{rank_reads, MemKey, Memory};
    use std::collections::{BTreeMap, BTreeSet};

    fn id(n: u64) -> String {
        BrandedId::new(*b"JOB", n)
            .map(|id| String::from_utf8_lossy(&id.encode()).into_owned())
            .expect("an id")
    }

    fn view(store: &Memory, n: u64) -> Result<Option<View<Vec<u8>>>, EmqError> {
        let member = id(n).into_bytes();
        let job_id = BrandedId::parse(&member).expect("an id");
        job(
            store,
            &Job {
                id: job_id,
                member: &member,
            },
        )
    }

    fn text(b: &[u8]) -> String {
        String::from_utf8_lossy(b).into_owned()
    }

    /// Every page from cursor `0` to the end, `count` at a time, with `between` run after each.
    fn walk(
        store: &Memory,
        set: Set,
        count: usize,
        mut between: impl FnMut(&Memory, usize),
    ) -> Vec<String> {
        let mut seen = Vec::new();
        let mut cursor = Cursor::Start;
        for n in 0.. {
            // A cursor that stopped moving would page forever.
            assert!(n < 100_000, "the walk ends");
            let page = page(store, set, &cursor, count, false).expect("a page");
            assert!(page.jobs.len() <= count);
            seen.extend(page.jobs.iter().map(|e| text(&e.member)));
            match page.next {
                Some(next) => cursor = Cursor::parse(&next).expect("the cursor a page gave"),
                None => break,
            }
            between(store, n);
        }
        seen
    }

    #[test]
    fn set_names_are_the_users_words() {
        assert_eq!(set_named(b"scheduled"), Ok(Set::Schedule));
        assert_eq!(set_named(b"pending"), Ok(Set::Pending));
        for bad in [&b"schedule"[..], b"PENDING", b"done", b""] {
            assert_eq!(set_named(bad), Err(EmqError::Set), "{bad:?}");
        }
        for set in VIEWED {
            assert_eq!(set_named(set_word(set).as_bytes()), Ok(set));
        }
    }

    #[test]
    fn cursors_round_trip_and_nothing_else_parses() {
        for (score, member) in [
            (0.0, &b"JOB0KHTOWnGLuC"[..]),
            (1718000000000.0, b"JOB0KHTOWnGLuC"),
            (-0.0, b"x"),
            (1.5, b"a:b"),
            (f64::INFINITY, b""),
            (f64::NEG_INFINITY, b"\x00\xff"),
            (1e300, b"JOB0KHTOWnGLuC"),
            (5e-324, b"m"),
        ] {
            let text = Cursor::encode(score, member);
            let Ok(Cursor::After {
                score: s,
                member: m,
            }) = Cursor::parse(&text)
            else {
                panic!("{text:?} parses");
            };
            assert_eq!((s.to_bits(), &m[..]), (score.to_bits(), member));
        }
        assert_eq!(Cursor::parse(b"0"), Ok(Cursor::Start));
        assert_eq!(
            Cursor::encode(1718000000000.0, b"JOB0KHTOWnGLuC"),
            b"1718000000000:JOB0KHTOWnGLuC"
        );
        for bad in [
            &b""[..],
            b"00",
            b"1",
            b"abc",
            b":JOB0KHTOWnGLuC",
            b"x:JOB0KHTOWnGLuC",
            b"01:JOB0KHTOWnGLuC",
            b"+1:JOB0KHTOWnGLuC",
            b"1e3:JOB0KHTOWnGLuC",
            b"1.50:JOB0KHTOWnGLuC",
            b"NaN:JOB0KHTOWnGLuC",
            b"nan:JOB0KHTOWnGLuC",
            b"infinity:JOB0KHTOWnGLuC",
            b" 1:JOB0KHTOWnGLuC",
            b"\xff:JOB0KHTOWnGLuC",
        ] {
            assert_eq!(Cursor::parse(bad), Err(EmqError::Cursor), "{bad:?}");
        }
    }

    #[test]
    fn scores_show_as_integers_unless_written_otherwise() {
        assert_eq!(show_score(0.0), Score::Int(0));
        assert_eq!(show_score(1718000000000.0), Score::Int(1718000000000));
        assert_eq!(show_score(-5.0), Score::Int(-5));
        assert_eq!(show_score(1.5), Score::Text("1.5".into()));
        assert_eq!(show_score(f64::INFINITY), Score::Text("inf".into()));
        assert_eq!(show_score(f64::NEG_INFINITY), Score::Text("-inf".into()));
        assert_eq!(
            show_score(9.3e18),
            Score::Text("9300000000000000000".into())
        );
        assert_eq!(show_score(i64::MIN as f64), Score::Int(i64::MIN));
        assert_eq!(
            show_score(-(i64::MIN as f64)),
            Score::Text("9223372036854776000".into())
        );
    }

    #[test]
    fn a_jobs_view_holds_its_row_and_its_set() {
        let m = Memory::at(1_000);
        m.put(
            Set::Pending,
            &id(1),
            0.0,
            &[("state", "pending"), ("attempts", "0"), ("payload", "p1")],
        );
        m.put(
            Set::Active,
            &id(2),
            31_000.0,
            &[
                ("state", "active"),
                ("attempts", "1"),
                ("payload", "p2"),
                ("progress", "50%"),
            ],
        );
        m.put(
            Set::Schedule,
            &id(3),
            9_000.0,
            &[
                ("state", "scheduled"),
                ("attempts", "1"),
                ("payload", "p3"),
                ("error", "boom"),
            ],
        );
        m.put(
            Set::Dead,
            &id(4),
            2_000.0,
            &[
                ("state", "dead"),
                ("attempts", "3"),
                ("payload", "p4"),
                ("error", "gave up"),
            ],
        );
        // Done: the row is kept, no set holds it.
        m.put(
            Set::Pending,
            &id(5),
            0.0,
            &[
                ("payload", "p5"),
                ("state", "done"),
                ("attempts", "1"),
                ("result", "ok"),
            ],
        );
        m.sets.borrow_mut()[Set::Pending.index()].remove(id(5).as_bytes());
        // A member whose row is gone.
        m.put(Set::Schedule, &id(6), 7_000.0, &[]);
        m.rows.borrow_mut().remove(id(6).as_bytes());

        let shown = |n: u64| {
            let v = view(&m, n).expect("a view").expect("a job");
            let row: Vec<(&str, String)> = v
                .row
                .iter()
                .map(|(f, t)| (field_name(*f), text(t)))
                .collect();
            (row, v.place)
        };
        let (row, place) = shown(1);
        assert_eq!(
            row,
            [
                ("state", "pending".into()),
                ("attempts", "0".into()),
                ("payload", "p1".into())
            ]
        );
        assert_eq!(place, Some((Set::Pending, 0.0)));
        let (row, place) = shown(2);
        assert_eq!(row.last(), Some(&("progress", "50%".into())));
        assert_eq!(place, Some((Set::Active, 31_000.0)));
        let (row, place) = shown(3);
        assert_eq!(row[3], ("error", "boom".into()));
        assert_eq!(place, Some((Set::Schedule, 9_000.0)));
        assert_eq!(shown(4).1, Some((Set::Dead, 2_000.0)));
        // The view's order is its own, not the row's.
        let (row, place) = shown(5);
        let names: Vec<&str> = row.iter().map(|(f, _)| *f).collect();
        assert_eq!(names, ["state", "attempts", "payload", "result"]);
        assert_eq!(place, None);
        let (row, place) = shown(6);
        assert!(row.is_empty());
        assert_eq!(place, Some((Set::Schedule, 7_000.0)));
        // No row, no set: nothing.
        assert!(view(&m, 7).expect("a read").is_none());
        assert!(m.writes.borrow().is_empty(), "a view writes nothing");
    }

    #[test]
    fn a_view_checks_permissions_and_types() {
        let m = Memory::at(0);
        m.put(Set::Pending, &id(1), 0.0, &[("state", "pending")]);
        m.denied.borrow_mut().push(MemKey::Row(id(1).into_bytes()));
        assert_eq!(view(&m, 1).err(), Some(EmqError::NoPerm));
        m.denied.borrow_mut().clear();
        m.denied.borrow_mut().push(MemKey::Set(Set::Dead));
        assert_eq!(view(&m, 1).err(), Some(EmqError::NoPerm));
        m.denied.borrow_mut().clear();
        m.other.borrow_mut().push(MemKey::Row(id(1).into_bytes()));
        assert_eq!(view(&m, 1).err(), Some(EmqError::WrongType));
        m.other.borrow_mut().clear();
        m.other.borrow_mut().push(MemKey::Set(Set::Active));
        assert_eq!(view(&m, 1).err(), Some(EmqError::WrongType));
    }

    #[test]
    fn pages_follow_the_sets_order_and_end_with_cursor_zero() {
        let m = Memory::at(0);
        for (n, score) in [(5, 30.0), (1, 10.0), (4, 20.0), (2, 20.0), (3, 20.0)] {
            m.put(
                Set::Schedule,
                &id(n),
                score,
                &[("attempts", "1"), ("payload", "p"), ("error", "e")],
            );
        }
        let all = walk(&m, Set::Schedule, 2, |_, _| {});
        assert_eq!(all, [1, 2, 3, 4, 5].map(id));
        // A page that ends at the last member says so.
        let p = page(&m, Set::Schedule, &Cursor::Start, 5, true).expect("a page");
        assert!(p.next.is_none());
        let first = &p.jobs[0];
        assert_eq!((first.score, first.attempts), (10.0, Some(1)));
        assert_eq!(first.payload.as_deref(), Some(&b"p"[..]));
        assert_eq!(first.error.as_deref(), Some(&b"e"[..]));
        let p = page(&m, Set::Schedule, &Cursor::Start, 4, false).expect("a page");
        assert_eq!(
            p.next.as_deref(),
            Some(Cursor::encode(20.0, id(4).as_bytes()).as_slice())
        );
        assert!(p.jobs[0].payload.is_none() && p.jobs[0].error.is_none());
        // A cursor past the end, or in an empty set: an empty last page.
        let past = Cursor::After {
            score: f64::INFINITY,
            member: b"z".to_vec(),
        };
        let p = page(&m, Set::Schedule, &past, 10, false).expect("a page");
        assert!(p.jobs.is_empty() && p.next.is_none());
        let p = page(&m, Set::Dead, &Cursor::Start, 10, false).expect("a page");
        assert!(p.jobs.is_empty() && p.next.is_none());
    }

    #[test]
    fn a_cursor_resumes_after_its_position_whether_or_not_that_member_is_still_there() {
        let m = Memory::at(0);
        for n in [1, 3, 5] {
            m.put(Set::Pending, &id(n), 0.0, &[]);
        }
        // The member the cursor names was claimed meanwhile: resume after its place.
        let gone = Cursor::After {
            score: 0.0,
            member: id(2).into_bytes(),
        };
        let p = page(&m, Set::Pending, &gone, 10, false).expect("a page");
        let got: Vec<String> = p.jobs.iter().map(|e| text(&e.member)).collect();
        assert_eq!(got, [id(3), id(5)]);
        let at = Cursor::After {
            score: 0.0,
            member: id(3).into_bytes(),
        };
        let p = page(&m, Set::Pending, &at, 10, false).expect("a page");
        assert_eq!(p.jobs.len(), 1);
    }

    #[test]
    fn members_without_a_row_or_outside_the_grammar_are_listed_bare() {
        let m = Memory::at(0);
        m.put(Set::Dead, &id(1), 5.0, &[("attempts", "2")]);
        m.put(Set::Dead, &id(2), 5.0, &[]);
        m.rows.borrow_mut().remove(id(2).as_bytes());
        m.sets.borrow_mut()[Set::Dead.index()].insert(b"garbage".to_vec(), 5.0);
        let p = page(&m, Set::Dead, &Cursor::Start, 10, true).expect("a page");
        let got: Vec<(String, Option<i64>)> = p
            .jobs
            .iter()
            .map(|e| (text(&e.member), e.attempts))
            .collect();
        assert_eq!(
            got,
            [(id(1), Some(2)), (id(2), None), ("garbage".into(), None)]
        );
        // The walk goes past them too.
        assert_eq!(walk(&m, Set::Dead, 1, |_, _| {}).len(), 3);
    }

    #[test]
    fn a_page_checks_the_set_and_every_row_it_reads() {
        let m = Memory::at(0);
        for n in 1..=3 {
            m.put(Set::Pending, &id(n), 0.0, &[("attempts", "0")]);
        }
        m.denied.borrow_mut().push(MemKey::Set(Set::Pending));
        assert!(matches!(
            page(&m, Set::Pending, &Cursor::Start, 10, false),
            Err(EmqError::NoPerm)
        ));
        // Another set is not this page's business.
        assert!(page(&m, Set::Dead, &Cursor::Start, 10, false).is_ok());
        m.denied.borrow_mut().clear();
        m.denied.borrow_mut().push(MemKey::Row(id(3).into_bytes()));
        assert!(matches!(
            page(&m, Set::Pending, &Cursor::Start, 10, false),
            Err(EmqError::NoPerm)
        ));
        // A page that does not reach that row reads it not.
        assert!(page(&m, Set::Pending, &Cursor::Start, 2, false).is_ok());
        m.denied.borrow_mut().clear();
        m.other.borrow_mut().push(MemKey::Row(id(2).into_bytes()));
        assert!(matches!(
            page(&m, Set::Pending, &Cursor::Start, 10, false),
            Err(EmqError::WrongType)
        ));
        m.other.borrow_mut().clear();
        m.other.borrow_mut().push(MemKey::Set(Set::Pending));
        assert!(matches!(
            page(&m, Set::Pending, &Cursor::Start, 10, false),
            Err(EmqError::WrongType)
        ));
    }

    /// A deterministic xorshift, for the changes made between pages.
    struct Rng(u64);

    impl Rng {
        fn below(&mut self, n: u64) -> u64 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            self.0 % n
        }
    }

    #[test]
    fn paging_while_the_set_changes_skips_and_repeats_only_jobs_that_moved() {
        for (set, count) in [(Set::Pending, 7), (Set::Schedule, 3), (Set::Active, 50)] {
            let m = Memory::at(0);
            let score_of = |n: u64| match set {
                Set::Pending => 0.0,
                _ => ((n * 7919) % 97) as f64, // many ties, in no order of n
            };
            for n in 1..=600 {
                m.put(set, &id(n), score_of(n), &[("attempts", "0")]);
            }
            let mut rng = Rng(0x5EED ^ count as u64);
            // Jobs that left or changed score: the only ones that may be missed or seen twice.
            let mut moved = BTreeSet::new();
            // Jobs added once, ahead of every cursor (minted later, pending) or anywhere.
            let (mut minted, mut added) = (BTreeSet::new(), BTreeSet::new());
            let mut next_new = 10_000;
            let seen = walk(&m, set, count, |m, _| {
                for _ in 0..5 {
                    let mut sets = m.sets.borrow_mut();
                    let members = &mut sets[set.index()];
                    match rng.below(4) {
                        0 => {
                            next_new += 1;
                            members.insert(id(next_new).into_bytes(), score_of(next_new));
                            minted.insert(id(next_new));
                        }
                        1 => {
                            let n = 700 + rng.below(9_000);
                            if members.insert(id(n).into_bytes(), score_of(n)).is_none() {
                                added.insert(id(n));
                            }
                        }
                        // Claimed, cancelled or finished: gone.
                        2 => {
                            let n = 1 + rng.below(600);
                            if members.remove(id(n).as_bytes()).is_some() {
                                moved.insert(id(n));
                            }
                        }
                        // A renewed lease, a retry: another score (pending scores stay 0:
                        // a job claimed and requeued comes back to its place).
                        _ => {
                            let n = 1 + rng.below(600);
                            if let Some(score) = members.get_mut(id(n).as_bytes()) {
                                *score = score_of(n) + rng.below(100) as f64;
                                if set == Set::Pending {
                                    *score = 0.0;
                                }
                                moved.insert(id(n));
                            }
                        }
                    }
                }
            });
            let mut times = BTreeMap::new();
            for job in &seen {
                *times.entry(job.clone()).or_insert(0) += 1;
            }
            let seen_times = |job: &String| times.get(job).copied().unwrap_or(0);
            for job in (1..=600).map(id).filter(|job| !moved.contains(job)) {
                assert_eq!(seen_times(&job), 1, "{set:?}: {job} stayed, seen once");
            }
            for job in added.iter().chain(&minted) {
                assert!(seen_times(job) <= 1, "{set:?}: {job} was added once");
            }
            if set == Set::Pending {
                // Minted after every id before it, so ahead of every cursor: never missed.
                for job in &minted {
                    assert_eq!(seen_times(job), 1, "{job} was minted ahead of the cursor");
                }
            }
            let changed = (moved.len(), added.len() + minted.len());
            assert!(
                changed.0 >= 10 && changed.1 >= 10,
                "{set:?}: the set changed {changed:?}"
            );
        }
    }

    #[test]
    fn a_page_deep_in_a_run_of_equal_scores_does_bounded_work() {
        // Work per page, in rank probes and members read, at the end of a pending set of n
        // members that all score 0.
        let work = |n: u64| {
            let m = Memory::at(0);
            {
                let mut sets = m.sets.borrow_mut();
                for i in 1..=n {
                    sets[Set::Pending.index()].insert(id(i).into_bytes(), 0.0);
                }
            }
            let cursor = Cursor::After {
                score: 0.0,
                member: id(n - 3).into_bytes(),
            };
            let before = rank_reads();
            let p = page(&m, Set::Pending, &cursor, 100, false).expect("a page");
            let after = rank_reads();
            let got: Vec<String> = p.jobs.iter().map(|e| text(&e.member)).collect();
            assert_eq!(got, [id(n - 2), id(n - 1), id(n)]);
            assert!(p.next.is_none());
            (after.0 - before.0, after.1 - before.1)
        };
        let (small_probes, small_read) = work(1_000);
        let (large_probes, large_read) = work(32_000);
        // Two counts, one probe per halving of the run, one read of the page.
        assert!(small_probes <= 2 + 11 + 1, "{small_probes}");
        assert!(large_probes <= 2 + 16 + 1, "{large_probes}");
        assert!(
            large_probes - small_probes <= 6,
            "{small_probes} -> {large_probes}"
        );
        // Members read: one per probe and the page, not the 32,000 before it.
        assert!(
            small_read <= 20 && large_read <= 25,
            "{small_read}, {large_read}"
        );
    }
}
