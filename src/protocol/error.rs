//! The error catalogue (protocol.md §7): one enum, rendered to a reply in one place.

use std::borrow::Cow;

/// Every way an EchoMQ command can refuse.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum EmqError {
    /// The queue name breaks protocol.md §1.1.
    Queue,
    /// An unknown key type.
    Type,
    /// A malformed branded id.
    Id,
    /// A well-formed id of a kind other than `JOB` at enqueue.
    Kind,
    /// `EMQ.DECODE` of a key outside the grammar.
    Key,
    /// A payload over `emq.max-payload-bytes`.
    Payload { limit: i64 },
    /// A stale or missing lease token.
    Lease,
    /// The token of an attempt `EMQ.CANCEL` ended while it ran.
    Cancelled,
    /// A renewal of an attempt past its deadline (`TIMEOUT`), ended or about to be.
    Timeout,
    /// An unknown set name (`EMQ.JOBS`, `EMQ.PURGE`).
    Set,
    /// A cursor no reply of this command gave.
    Cursor,
    /// `EMQ.PURGE` of the active set, whose jobs workers hold under a lease.
    Leased,
    /// The user may not touch a derived key.
    NoPerm,
    /// The user may no longer run the command: its rules changed while the command waited.
    NoPermCommand,
    /// The client's user cannot be looked up to check its key permissions: a user a module
    /// created (`RM_CreateModuleUser`), which the server keeps out of its ACL list.
    UncheckableUser,
    /// A key of the queue holds another type.
    WrongType,
    /// Wrong number of arguments for the command.
    Arity(&'static str),
    /// A malformed argument, with what was wrong.
    Syntax(Cow<'static, str>),
    /// The queue's slot is being migrated: retry (as the server's multi-key commands do).
    TryAgain,
    /// Past `maxmemory`, a blocked claim that was woken: the server refuses a new one with the
    /// same reply before it runs.
    Oom,
    /// A repeating schedule refused: a malformed spec (the parser's reason), one that never
    /// fires, or a queue that holds as many schedules as it may.
    Cron(Cow<'static, str>),
    /// A child's parent refused it: missing, not waiting, or with all its children.
    Parent(Cow<'static, str>),
    /// A job sent to a partitioned queue's own name, or to a partition its id (or group) does
    /// not route to: the queue's width, so the client routes again (docs/cluster.md).
    Spanned { width: u16 },
    /// `EMQ.SPAN` or `EMQ.UNSPAN` refused: another width, a partition of another queue, or a
    /// queue that holds jobs.
    Span(Cow<'static, str>),
    /// A blocked claim's `WAKE` named a queue whose slot another primary serves, at `addr`:
    /// the client's map of the slots is stale.
    Moved { slot: u16, addr: String },
    /// A handler panicked; nothing was written past validation.
    Internal,
}

impl EmqError {
    /// The error reply text, starting with its code.
    pub fn message(&self) -> Cow<'static, str> {
        match self {
            EmqError::Queue => {
                "EMQQUEUE queue name must be 1-128 printable ASCII bytes without braces".into()
            }
            EmqError::Type => {
                "EMQTYPE unknown key type; expected pending, active, schedule, dead, meta, events, job, rate, unique, cron, waiting or outbox"
                    .into()
            }
            EmqError::Id => "EMQID malformed branded id; expected 3 upper-case letters and 11 base62 digits below 2^63".into(),
            EmqError::Kind => "EMQKIND job id must be JOB-namespaced".into(),
            EmqError::Key => "EMQKEY key is outside the emq grammar".into(),
            EmqError::Payload { limit } => {
                format!("EMQPAYLOAD payload exceeds emq.max-payload-bytes ({limit})").into()
            }
            EmqError::Lease => "EMQLEASE stale or missing lease token".into(),
            EmqError::Cancelled => "EMQCANCELLED the job was cancelled while it ran".into(),
            EmqError::Timeout => "EMQTIMEOUT the attempt ran past its deadline".into(),
            EmqError::Set => {
                "EMQSET unknown set; expected pending, active, scheduled, dead or waiting".into()
            }
            EmqError::Leased => "EMQSET active jobs are leased to workers and cannot be purged; \
                                  expected pending, scheduled or dead"
                .into(),
            EmqError::Cursor => "EMQCURSOR malformed cursor; pass 0 or a cursor a reply gave".into(),
            EmqError::NoPerm => "NOPERM No permissions to access a key".into(),
            EmqError::NoPermCommand => "NOPERM No permissions to run this command".into(),
            EmqError::UncheckableUser => "NOPERM EchoMQ cannot check the key permissions of \
                                          this client's user, which is not in the ACL list \
                                          (a module-created user)"
                .into(),
            EmqError::WrongType => {
                "WRONGTYPE Operation against a key holding the wrong kind of value".into()
            }
            EmqError::Arity(cmd) => {
                format!("ERR wrong number of arguments for '{cmd}' command").into()
            }
            EmqError::Syntax(what) => format!("ERR {what}").into(),
            EmqError::TryAgain => {
                "TRYAGAIN Multiple keys request during rehashing of slot".into()
            }
            EmqError::Oom => "OOM command not allowed when used memory > 'maxmemory'.".into(),
            EmqError::Cron(why) => format!("EMQCRON {why}").into(),
            EmqError::Parent(why) => format!("EMQPARENT {why}").into(),
            EmqError::Spanned { width: 0 } => "EMQSPANNED 0 the queue is a retired partition; \
                                                send the job to its partitioned queue's own name"
                .into(),
            EmqError::Spanned { width } => format!(
                "EMQSPANNED {width} the queue is spanned over {width} partitions; send the job to \
                 the partition its id, or its group, routes to"
            )
            .into(),
            EmqError::Span(why) => format!("EMQSPAN {why}").into(),
            EmqError::Moved { slot, addr } => format!("MOVED {slot} {addr}").into(),
            EmqError::Internal => "ERR internal error in EchoMQ; see the server log".into(),
        }
    }

    /// The short reason name used by `INFO emq` refusal counters.
    pub fn reason(&self) -> &'static str {
        match self {
            EmqError::Queue => "queue",
            EmqError::Type => "type",
            EmqError::Id => "id",
            EmqError::Kind => "kind",
            EmqError::Key => "key",
            EmqError::Payload { .. } => "payload",
            EmqError::Lease => "lease",
            EmqError::Cancelled => "cancelled",
            EmqError::Timeout => "timeout",
            EmqError::Set | EmqError::Leased => "set",
            EmqError::Cursor => "cursor",
            EmqError::NoPerm | EmqError::NoPermCommand | EmqError::UncheckableUser => "noperm",
            EmqError::WrongType => "wrongtype",
            EmqError::Arity(_) | EmqError::Syntax(_) => "syntax",
            EmqError::TryAgain => "tryagain",
            EmqError::Oom => "oom",
            EmqError::Cron(_) => "cron",
            EmqError::Parent(_) => "parent",
            EmqError::Spanned { .. } => "spanned",
            EmqError::Span(_) => "span",
            EmqError::Moved { .. } => "moved",
            EmqError::Internal => "internal",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kind_refusal_is_the_exact_reference_text() {
        assert_eq!(
            EmqError::Kind.message(),
            "EMQKIND job id must be JOB-namespaced"
        );
    }

    #[test]
    fn every_message_starts_with_its_code() {
        for (err, code) in [
            (EmqError::Queue, "EMQQUEUE "),
            (EmqError::Type, "EMQTYPE "),
            (EmqError::Id, "EMQID "),
            (EmqError::Key, "EMQKEY "),
            (EmqError::Payload { limit: 5 }, "EMQPAYLOAD "),
            (EmqError::Lease, "EMQLEASE "),
            (EmqError::Cancelled, "EMQCANCELLED "),
            (EmqError::Timeout, "EMQTIMEOUT "),
            (EmqError::Set, "EMQSET "),
            (EmqError::Leased, "EMQSET "),
            (EmqError::Cursor, "EMQCURSOR "),
            (EmqError::NoPerm, "NOPERM "),
            (EmqError::NoPermCommand, "NOPERM "),
            (EmqError::UncheckableUser, "NOPERM "),
            (EmqError::WrongType, "WRONGTYPE "),
            (EmqError::Arity("emq.key"), "ERR "),
            (EmqError::Oom, "OOM "),
            (EmqError::Cron("x".into()), "EMQCRON "),
            (EmqError::Parent("x".into()), "EMQPARENT "),
            (EmqError::Spanned { width: 12 }, "EMQSPANNED 12 "),
            (EmqError::Span("x".into()), "EMQSPAN "),
            (
                EmqError::Moved {
                    slot: 1,
                    addr: "127.0.0.1:7001".into(),
                },
                "MOVED 1 127.0.0.1:7001",
            ),
        ] {
            assert!(err.message().starts_with(code), "{err:?}");
            assert!(!err.message().contains(['\r', '\n']));
        }
    }
}
