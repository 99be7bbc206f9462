//! The job row (protocol.md §1.2): its fields, its states and their words, and the payload limit.

use super::error::EmqError;
use super::settings;

/// The protocol version this module speaks (protocol.md §4), which `EMQ.VERSION` answers.
pub const PROTOCOL_VERSION: &str = "echomq:2.0.0";

/// Row states (protocol.md §6).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum State {
    Pending,
    Scheduled,
    Active,
    Done,
    Dead,
    /// A parent waiting for its children (docs/flows.md): in `waiting`, not claimable.
    Waiting,
}

impl State {
    /// The state's word in the row's `state` field.
    pub fn as_bytes(self) -> &'static [u8] {
        match self {
            State::Pending => b"pending",
            State::Scheduled => b"scheduled",
            State::Active => b"active",
            State::Done => b"done",
            State::Dead => b"dead",
            State::Waiting => b"waiting",
        }
    }
}

/// The fields of a job row. A new row holds `state`, `attempts` and `payload`, in that order,
/// as the reference `@enqueue` script writes them; `error` comes with a failure, `result` with
/// an acknowledgement that carries one, `progress` with a renewal that carries one. A job that
/// uses none of these keeps the reference row, byte for byte.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Field {
    State,
    Attempts,
    Payload,
    Error,
    Result,
    Progress,
    /// Where the job stands among the ready ones (its `pending` score), where not 0.
    Priority,
    /// The unique key the job was enqueued with (`EMQ.ENQUEUE ... UNIQUE`), where it has one.
    Unique,
    /// The repeating schedule that enqueued the job (`EMQ.CRON`), where one did.
    Cron,
    /// The lease tokens the job took before its attempts were last reset (`EMQ.REQUEUE`),
    /// where they were: its token is `fence` + `attempts`, so tokens only grow over its life.
    Fence,
    /// A parent's: how many children it waits for (`EMQ.ENQUEUE ... CHILDREN`).
    Children,
    /// A parent's: how many children registered with it so far.
    Adopted,
    /// A parent's: how many of its children finished so far.
    Finished,
    /// A child's: its parents, a line each (`protocol::flow::write_parents`).
    Parents,
    /// A child's: the parents that refused it at hand-over, a line each.
    Orphan,
    /// The lease token of the attempt `EMQ.CANCEL` ended while it ran, where one did.
    Cancelled,
    /// The job's own limit on one attempt, in ms (`EMQ.ENQUEUE ... TIMEOUT`), where it has one.
    Timeout,
    /// The current attempt's deadline (unix ms), in a queue whose attempts may have one: a
    /// claim writes it for a timed attempt and removes it for one that is not.
    Deadline,
    /// The lease token of the attempt whose deadline ended it, where one did.
    TimedOut,
    /// The group the job is in (`EMQ.ENQUEUE ... GROUP`), where it is in a named one.
    Group,
    /// The job's headers (`EMQ.ENQUEUE ... HEADERS`), where it has some: a line each
    /// (`protocol::headers`).
    Headers,
    /// When the job last became ready other than by its enqueue (unix ms): promoted, requeued,
    /// released or its lease run out, while the server keeps metrics.
    Ready,
}

impl Field {
    /// Every field, in the row's order (the reference fields first).
    pub const ALL: [Field; 22] = [
        Field::State,
        Field::Attempts,
        Field::Payload,
        Field::Error,
        Field::Result,
        Field::Progress,
        Field::Priority,
        Field::Unique,
        Field::Cron,
        Field::Fence,
        Field::Children,
        Field::Adopted,
        Field::Finished,
        Field::Parents,
        Field::Orphan,
        Field::Cancelled,
        Field::Timeout,
        Field::Deadline,
        Field::TimedOut,
        Field::Group,
        Field::Headers,
        Field::Ready,
    ];

    pub fn as_cstr(self) -> &'static std::ffi::CStr {
        match self {
            Field::State => c"state",
            Field::Attempts => c"attempts",
            Field::Payload => c"payload",
            Field::Error => c"error",
            Field::Result => c"result",
            Field::Progress => c"progress",
            Field::Priority => c"priority",
            Field::Unique => c"unique",
            Field::Cron => c"cron",
            Field::Fence => c"fence",
            Field::Children => c"children",
            Field::Adopted => c"adopted",
            Field::Finished => c"finished",
            Field::Parents => c"parents",
            Field::Orphan => c"orphan",
            Field::Cancelled => c"cancelled",
            Field::Timeout => c"timeout",
            Field::Deadline => c"deadline",
            Field::TimedOut => c"timedout",
            Field::Group => c"group",
            Field::Headers => c"headers",
            Field::Ready => c"ready",
        }
    }

    pub fn as_bytes(self) -> &'static [u8] {
        self.as_cstr().to_bytes()
    }
}

/// What happened to a job (or a queue), as its event stream says (`event` of each entry).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Event {
    /// Written to `pending`.
    Enqueued,
    /// Written to `schedule`, for later.
    Scheduled,
    /// Moved from `schedule` to `pending`, its time come.
    Promoted,
    /// Moved from `active` back to `pending`: its lease ran out.
    Expired,
    Claimed,
    Acked,
    /// Failed, and scheduled for a retry.
    Retrying,
    /// Moved to `dead`: a failure or a lease run out on its last attempt.
    Dead,
    Cancelled,
    /// Moved from `dead` back to `pending`.
    Requeued,
    /// Deleted by `EMQ.PURGE` or by the dead set's retention.
    Purged,
    /// The queue was paused (no id, attempt 0).
    Paused,
    /// The queue was resumed (no id, attempt 0).
    Resumed,
    /// Written to `waiting`: a parent, until its children finish.
    Waiting,
    /// Moved from `waiting` to `pending` or `schedule`: its children finished.
    Released,
}

impl Event {
    pub fn as_bytes(self) -> &'static [u8] {
        match self {
            Event::Enqueued => b"enqueued",
            Event::Scheduled => b"scheduled",
            Event::Promoted => b"promoted",
            Event::Expired => b"expired",
            Event::Claimed => b"claimed",
            Event::Acked => b"acked",
            Event::Retrying => b"retrying",
            Event::Dead => b"dead",
            Event::Cancelled => b"cancelled",
            Event::Requeued => b"requeued",
            Event::Purged => b"purged",
            Event::Paused => b"paused",
            Event::Resumed => b"resumed",
            Event::Waiting => b"waiting",
            Event::Released => b"released",
        }
    }
}

/// The priorities a job may have: its score in `pending`, lower first (ids in mint order within
/// one). The default, 0, is the reference row's: a job without one stores no `priority` field.
pub const PRIORITY_MIN: i64 = -1_000_000;
pub const PRIORITY_MAX: i64 = 1_000_000;

/// The row's `priority` as a number: 0 when missing or not one in range (a row written by hand).
pub fn priority_from(text: Option<&[u8]>) -> i64 {
    text.and_then(|p| std::str::from_utf8(p).ok()?.parse::<i64>().ok())
        .filter(|p| (PRIORITY_MIN..=PRIORITY_MAX).contains(p))
        .unwrap_or(0)
}

/// A payload (or an error text) against `emq.max-payload-bytes`.
pub fn check_payload(payload: &[u8]) -> Result<(), EmqError> {
    let limit = settings::max_payload_bytes();
    if i64::try_from(payload.len()).map_or(true, |n| n > limit) {
        return Err(EmqError::Payload { limit });
    }
    Ok(())
}

/// The row's `attempts` as a number: 0 when missing, not a number or negative (a row written
/// by hand), so a claim's token is always at least 1.
pub fn attempts_from(text: Option<&[u8]>) -> i64 {
    text.and_then(|a| std::str::from_utf8(a).ok()?.parse::<i64>().ok())
        .map_or(0, |a| a.max(0))
}

/// Jobs handed to a worker, as a claim replies them: each job's id, payload and headers end to
/// end in one buffer, so a claim of many jobs makes no allocation a job, and its lease token.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Claimed {
    bytes: Vec<u8>,
    /// Each job: where its id, its payload and its headers end in `bytes`, and its token.
    jobs: Vec<(usize, usize, usize, i64)>,
}

/// One job of [`Claimed`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ClaimedJob<'a> {
    pub id: &'a [u8],
    pub payload: &'a [u8],
    /// Its `headers` field (`protocol::headers`), empty where it has none.
    pub headers: &'a [u8],
    /// The lease token: the job's attempts, this one included, after its fence (the job's
    /// attempts where it was never requeued).
    pub token: i64,
}

impl Claimed {
    /// Room for `jobs` jobs (their bytes are reserved as for short payloads).
    pub fn with_capacity(jobs: usize) -> Self {
        Self {
            bytes: Vec::with_capacity(jobs.saturating_mul(64)),
            jobs: Vec::with_capacity(jobs),
        }
    }

    pub fn push(&mut self, job: ClaimedJob<'_>) {
        self.bytes.extend_from_slice(job.id);
        let id_end = self.bytes.len();
        self.bytes.extend_from_slice(job.payload);
        let payload_end = self.bytes.len();
        self.bytes.extend_from_slice(job.headers);
        self.jobs
            .push((id_end, payload_end, self.bytes.len(), job.token));
    }

    pub fn len(&self) -> usize {
        self.jobs.len()
    }

    pub fn is_empty(&self) -> bool {
        self.jobs.is_empty()
    }

    /// The jobs, in the order they were taken.
    pub fn iter(&self) -> impl Iterator<Item = ClaimedJob<'_>> {
        let starts = std::iter::once(0).chain(self.jobs.iter().map(|&(_, _, end, _)| end));
        self.jobs
            .iter()
            .zip(starts)
            .map(|(&(id_end, payload_end, end, token), start)| ClaimedJob {
                id: &self.bytes[start..id_end],
                payload: &self.bytes[id_end..payload_end],
                headers: &self.bytes[payload_end..end],
                token,
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn attempts_written_by_hand_read_as_zero() {
        assert_eq!(attempts_from(Some(b"3")), 3);
        assert_eq!(attempts_from(Some(b"-2")), 0);
        assert_eq!(attempts_from(Some(b"x")), 0);
        assert_eq!(attempts_from(None), 0);
    }

    #[test]
    fn payloads_over_the_limit_are_refused() {
        let limit = settings::max_payload_bytes() as usize;
        assert!(check_payload(&vec![0; limit]).is_ok());
        assert_eq!(
            check_payload(&vec![0; limit + 1]),
            Err(EmqError::Payload {
                limit: limit as i64
            })
        );
    }

    #[test]
    fn claimed_jobs_read_back_as_pushed() {
        let mut c = super::Claimed::with_capacity(1);
        assert!(c.is_empty());
        let long = b"a longer payload than the reserve of sixty-four bytes for a job";
        let jobs = [
            ClaimedJob {
                id: b"JOB1",
                payload: b"first",
                headers: b"",
                token: 1,
            },
            ClaimedJob {
                id: b"JOB22",
                payload: b"",
                headers: b"traceparent:00-ab",
                token: 7,
            },
            ClaimedJob {
                id: b"JOB333",
                payload: long,
                headers: b"",
                token: -2,
            },
        ];
        for job in jobs {
            c.push(job);
        }
        assert_eq!(c.iter().collect::<Vec<_>>(), jobs);
        assert_eq!(c.len(), 3);
    }
}
