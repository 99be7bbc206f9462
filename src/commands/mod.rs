//! One file per command: its descriptor (`COMMAND`: name, flags, arity, key spec and the
//! `COMMAND DOCS` arguments, which `lib.rs` lists), and its handler: parse the arguments (pure),
//! then one `queue` call, then the reply.
//! Refusals come in protocol.md §4 order; each is a typed `EmqError`, rendered in one place (the host's
//! guard).

#![forbid(unsafe_code)]

pub mod ack;
pub mod adopt;
pub mod cancel;
pub mod children;
pub mod claim;
pub mod cron;
pub mod cursor;
pub mod decode;
pub mod delivered;
pub mod enqueue;
pub mod events;
pub mod fail;
pub mod groups;
pub mod handover;
pub mod job;
pub mod jobs;
pub mod key;
pub mod limit;
pub mod mack;
pub mod menqueue;
pub mod metrics;
pub mod outbox;
pub mod pause;
pub mod purge;
pub mod queues;
pub mod renew;
pub mod requeue;
pub mod resume;
pub mod slot;
pub mod span;
pub mod stats;
pub mod unspan;
pub mod version;
pub mod width;

use valkey_module::Context;

use crate::host::acl::Access;
use crate::host::register::{Arg, ArgKind};
use crate::host::reply::Args;
use crate::host::store::{with_queue, ServerStore};
use crate::host::string::{Str, Text};
use crate::protocol::{headers, BrandedId, EmqError, Group, Queue};
use crate::queue::job::Target;
use crate::queue::Job;
use crate::runtime::cluster;

/// The arguments many commands document alike, as [`parse_queue`], [`parse_id`] and
/// [`parse_token`] read them.
pub const QUEUE: Arg = Arg::required(c"queue", ArgKind::String);
pub const ID: Arg = Arg::required(c"id", ArgKind::String);
pub const TOKEN: Arg = Arg::required(c"token", ArgKind::Integer);

/// protocol.md §1.1: the queue name, or `EMQQUEUE`.
pub fn parse_queue(bytes: &[u8]) -> Result<Queue<'_>, EmqError> {
    Queue::parse(bytes).ok_or(EmqError::Queue)
}

/// A group's name (protocol.md §9), or a syntax error.
pub fn parse_group(bytes: &[u8]) -> Result<Group<'_>, EmqError> {
    Group::parse(bytes).ok_or_else(|| {
        EmqError::Syntax("a group's name is 1 to 128 bytes of 0x21..0x7E without { or }".into())
    })
}

/// `HEADERS <n> <key> <value> ...`'s pairs after its name, as the row's `headers` field
/// (`protocol::headers`), or a syntax error.
pub fn parse_headers(options: &mut cursor::ArgCursor<'_, '_>) -> Result<Vec<u8>, EmqError> {
    let n = options.next_int(1, headers::MAX_HEADERS as i64, "HEADERS")? as usize;
    options.expect_values(2 * n)?;
    let mut pairs = Vec::with_capacity(n);
    for _ in 0..n {
        pairs.push((options.value()?, options.value()?));
    }
    headers::encode(pairs.into_iter())
}

/// `HEADERS`'s documented arguments: the count, then each key and value.
pub const HEADERS: Arg = Arg::optional(
    c"headers",
    ArgKind::Block(&[
        Arg::keyword(c"count", c"HEADERS", ArgKind::Integer),
        Arg::multiple(
            c"header",
            ArgKind::Block(&[
                Arg::required(c"key", ArgKind::String),
                Arg::required(c"value", ArgKind::String),
            ]),
        ),
    ]),
);

/// protocol.md §2: a well-formed branded id of any kind, or `EMQID`.
pub fn parse_id(bytes: &[u8]) -> Result<BrandedId, EmqError> {
    BrandedId::parse(bytes).ok_or(EmqError::Id)
}

/// A decimal integer in `min..=max`, or a syntax error naming `what`.
pub fn parse_int(bytes: &[u8], min: i64, max: i64, what: &str) -> Result<i64, EmqError> {
    std::str::from_utf8(bytes)
        .ok()
        .and_then(|s| s.parse::<i64>().ok())
        .filter(|n| (min..=max).contains(n))
        .ok_or_else(|| {
            EmqError::Syntax(format!("{what} must be an integer from {min} to {max}").into())
        })
}

/// A lease token (`EMQLEASE` when it cannot be one).
pub fn parse_token(bytes: &[u8]) -> Result<i64, EmqError> {
    parse_int(bytes, 1, i64::MAX, "token").map_err(|_| EmqError::Lease)
}

/// Room for one more job in a batch that holds `jobs` (`EMQ.MENQUEUE`, `EMQ.MACK`): at most
/// `max` a call.
pub fn check_batch(jobs: usize, max: usize) -> Result<(), EmqError> {
    if jobs == max {
        return Err(EmqError::Syntax(
            format!("at most {max} jobs per call").into(),
        ));
    }
    Ok(())
}

/// Whether an option token matches `name`, ignoring ASCII case (as the server's own options).
pub fn is_token(bytes: &[u8], name: &str) -> bool {
    bytes.eq_ignore_ascii_case(name.as_bytes())
}

/// `<queue> <id>` at `args[1..=2]`: the queue, the id and the client's own text of it (a
/// well-formed id is canonical, so that text is its set member), once the queue's slot is
/// known not to be migrating.
pub fn parse_job<'a>(args: &Args<'a>) -> Result<(Queue<'a>, BrandedId, Str<'a>), EmqError> {
    let queue = parse_queue(args.bytes(1))?;
    let id = parse_id(args.bytes(2))?;
    cluster::check_stable(queue)?;
    let member = args.string(2).ok_or(EmqError::Internal)?;
    Ok((queue, id, member))
}

/// `<queue> <id>` at `args[1..=2]` ([`parse_job`]), then `f` over the queue's store and the
/// job's keys, named and permission-checked ([`Target::check`]); what the commands on one job
/// share.
pub fn with_job<'a, R>(
    ctx: &Context,
    args: &Args<'a>,
    f: impl for<'s, 'j> FnOnce(
        &'j ServerStore<'s, 'a>,
        &'j Target<'j, ServerStore<'s, 'a>>,
    ) -> Result<R, EmqError>,
) -> Result<R, EmqError> {
    let (queue, id, member) = parse_job(args)?;
    with_queue(ctx, queue, Access::ReadWrite, |store| {
        let member = Text::Borrowed(member);
        let target = Target::check(
            store,
            Job {
                id,
                member: &member,
            },
        )?;
        f(store, &target)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn integers_are_bounded() {
        assert_eq!(parse_int(b"5", 1, 10, "COUNT"), Ok(5));
        assert!(parse_int(b"0", 1, 10, "COUNT").is_err());
        assert!(parse_int(b"11", 1, 10, "COUNT").is_err());
        assert!(parse_int(b"-1", 0, 10, "BLOCK").is_err());
        assert!(parse_int(b"1.5", 0, 10, "BLOCK").is_err());
        assert!(parse_int(b"", 0, 10, "BLOCK").is_err());
        assert!(parse_int(b"99999999999999999999", 0, i64::MAX, "AT").is_err());
    }

    #[test]
    fn a_batch_has_room_below_its_most() {
        assert_eq!(check_batch(0, 2), Ok(()));
        assert_eq!(check_batch(1, 2), Ok(()));
        assert_eq!(
            check_batch(2, 2),
            Err(EmqError::Syntax("at most 2 jobs per call".into()))
        );
    }

    #[test]
    fn tokens_ignore_case() {
        assert!(is_token(b"count", "COUNT"));
        assert!(is_token(b"Retry-In", "RETRY-IN"));
        assert!(!is_token(b"COUNTS", "COUNT"));
    }

    #[test]
    fn a_token_that_cannot_be_one_is_a_lease_refusal() {
        assert_eq!(parse_token(b"0"), Err(EmqError::Lease));
        assert_eq!(parse_token(b"x"), Err(EmqError::Lease));
        assert_eq!(parse_token(b"3"), Ok(3));
    }
}
