//! `EMQ.LIMIT <queue> [CONCURRENCY <n>|OFF] [RATE <n> PER <ms> | RATE OFF] [TIMEOUT <ms>|OFF]
//! [GROUP-CONCURRENCY <n>|OFF] | EMQ.LIMIT <queue> OFF`: sets or removes the queue's limits;
//! with no option, reports them. Either way the reply is the limits and their use now.
//! `EMQ.LIMIT <queue> GROUP <group> [CONCURRENCY <n>|OFF]` does the same for one group's own.

use valkey_module::Context;

use super::cursor::{check_arity, syntax, ArgCursor};
use super::{is_token, parse_int, parse_queue, QUEUE};
use crate::host::acl::Access;
use crate::host::register::{
    Arg, ArgKind::Block, ArgKind::Integer as Int, ArgKind::OneOf, ArgKind::PureToken as Pure,
    ArgKind::String as Str, Command,
};
use crate::host::reply::{Args, CommandResult, Reply};
use crate::host::store::with_queue;
use crate::protocol::limits::{Rate, MAX_CONCURRENCY, MAX_PER_MS, MAX_RATE, MAX_TIMEOUT_MS};
use crate::protocol::EmqError;
use crate::queue::limit::{self, Change, Usage};
use crate::queue::quota::{self, GroupUsage};
use crate::runtime::cluster;

/// An option's value: `OFF` (`None`), or a whole number from 1 to `max`.
fn int_or_off(
    options: &mut ArgCursor<'_, '_>,
    max: i64,
    name: &'static str,
) -> Result<Option<i64>, EmqError> {
    let value = options.value()?;
    match is_token(value, "OFF") {
        true => Ok(None),
        false => parse_int(value, 1, max, name).map(Some),
    }
}

/// `GROUP <group> [CONCURRENCY <n>|OFF]`: the group, and its change (`None`: a report).
fn parse_one_group<'a>(
    args: &Args<'a>,
) -> Result<Option<(&'a [u8], Option<Option<i64>>)>, EmqError> {
    if args.len() < 4 || !is_token(args.bytes(2), "GROUP") {
        return Ok(None);
    }
    let group = super::parse_group(args.bytes(3))?.as_bytes();
    match args.len() {
        4 => Ok(Some((group, None))),
        6 if is_token(args.bytes(4), "CONCURRENCY") => {
            let mut options = ArgCursor::new(args, 5);
            let n = int_or_off(&mut options, MAX_CONCURRENCY, "CONCURRENCY")?;
            Ok(Some((group, Some(n))))
        }
        _ => Err(syntax(
            "syntax error: expected GROUP <group> [CONCURRENCY <n>|OFF]",
        )),
    }
}

/// The options after the queue (`None`: a report).
fn parse_change(args: &Args<'_>) -> Result<Option<Change>, EmqError> {
    if args.len() == 2 {
        return Ok(None);
    }
    if args.len() == 3 && is_token(args.bytes(2), "OFF") {
        return Ok(Some(Change::OFF));
    }
    let mut change = Change::default();
    let mut options = ArgCursor::new(args, 2);
    while let Some(name) = options.next_word() {
        if is_token(name, "CONCURRENCY") && change.concurrency.is_none() {
            change.concurrency = Some(int_or_off(&mut options, MAX_CONCURRENCY, "CONCURRENCY")?);
        } else if is_token(name, "RATE") && change.rate.is_none() {
            if options.next_is("OFF") {
                change.rate = Some(None);
                continue;
            }
            options.expect_values(3)?;
            let n = options.next_int(1, MAX_RATE, "RATE")?;
            if !options.next_is("PER") {
                return Err(syntax("syntax error: expected RATE <n> PER <ms>"));
            }
            let per_ms = options.next_int(1, MAX_PER_MS, "PER")?;
            change.rate = Some(Some(Rate { n, per_ms }));
        } else if is_token(name, "TIMEOUT") && change.timeout.is_none() {
            change.timeout = Some(int_or_off(&mut options, MAX_TIMEOUT_MS, "TIMEOUT")?);
        } else if is_token(name, "GROUP-CONCURRENCY") && change.group_concurrency.is_none() {
            change.group_concurrency = Some(int_or_off(
                &mut options,
                MAX_CONCURRENCY,
                "GROUP-CONCURRENCY",
            )?);
        } else {
            return Err(syntax(
                "syntax error: expected CONCURRENCY <n>|OFF, RATE <n> PER <ms>|OFF, TIMEOUT <ms>|OFF, GROUP-CONCURRENCY <n>|OFF, or OFF alone, or GROUP <group> [CONCURRENCY <n>|OFF]",
            ));
        }
    }
    Ok(Some(change))
}

/// The limits and their use, as `EMQ.LIMIT` replies and `EMQ.STATS` ends: a limit not set is
/// null.
pub fn usage_fields(usage: &Usage) -> Vec<(&'static str, Reply)> {
    let opt = |v: Option<i64>| v.map_or(Reply::Null, Reply::Integer);
    vec![
        ("concurrency", opt(usage.limits.concurrency)),
        ("rate", opt(usage.limits.rate.map(|r| r.n))),
        ("rate-per", opt(usage.limits.rate.map(|r| r.per_ms))),
        ("rate-used", Reply::Integer(usage.in_window as i64)),
        ("timeout", opt(usage.limits.timeout)),
        ("group-concurrency", opt(usage.limits.group_concurrency)),
    ]
}

/// One group's limit and its use, as `EMQ.LIMIT <queue> GROUP <g>` replies.
fn group_fields(group: &[u8], usage: &GroupUsage) -> Reply {
    let opt = |v: Option<i64>| v.map_or(Reply::Null, Reply::Integer);
    Reply::Map(vec![
        ("group", Reply::Bulk(group.to_vec())),
        ("active", Reply::Integer(usage.active as i64)),
        ("ready", Reply::Integer(usage.ready as i64)),
        ("concurrency", opt(usage.own)),
        ("group-concurrency", opt(usage.default)),
        ("held", Reply::Integer(i64::from(usage.held))),
    ])
}

pub const COMMAND: Command = Command {
    name: c"emq.limit",
    callback: crate::callback!(run),
    flags: c"write deny-oom fast",
    arity: -2,
    routes_by_queue: true,
    summary: c"Set (or with no option, report) the queue's concurrency and sliding-window rate limits, its default limit on one attempt's time and its groups' concurrency limits; replies the limits and their use",
    complexity: c"O(1), or O(log(N)+E) under a rate limit, with N claims in the window and E past it",
    args: &[
        QUEUE,
        Arg::optional(
            c"limits",
            OneOf(&[
                Arg::keyword(c"off", c"OFF", Pure),
                Arg::required(
                    c"set",
                    Block(&[
                        Arg::token(
                            c"concurrency",
                            c"CONCURRENCY",
                            OneOf(&[
                                Arg::required(c"n", Int),
                                Arg::keyword(c"off", c"OFF", Pure),
                            ]),
                        ),
                        Arg::token(
                            c"rate",
                            c"RATE",
                            OneOf(&[
                                Arg::required(
                                    c"window",
                                    Block(&[
                                        Arg::required(c"n", Int),
                                        Arg::keyword(c"per", c"PER", Int),
                                    ]),
                                ),
                                Arg::keyword(c"off", c"OFF", Pure),
                            ]),
                        ),
                        Arg::token(
                            c"timeout",
                            c"TIMEOUT",
                            OneOf(&[
                                Arg::required(c"ms", Int),
                                Arg::keyword(c"off", c"OFF", Pure),
                            ]),
                        ),
                        Arg::token(
                            c"group-concurrency",
                            c"GROUP-CONCURRENCY",
                            OneOf(&[
                                Arg::required(c"n", Int),
                                Arg::keyword(c"off", c"OFF", Pure),
                            ]),
                        ),
                    ]),
                ),
                Arg::required(
                    c"one-group",
                    Block(&[
                        Arg::keyword(c"group", c"GROUP", Str),
                        Arg::token(
                            c"concurrency",
                            c"CONCURRENCY",
                            OneOf(&[
                                Arg::required(c"n", Int),
                                Arg::keyword(c"off", c"OFF", Pure),
                            ]),
                        ),
                    ]),
                ),
            ]),
        ),
    ],
};

pub fn run(ctx: &Context, args: &Args) -> CommandResult {
    check_arity(args, &COMMAND)?;
    let queue = parse_queue(args.bytes(1))?;
    if let Some((group, change)) = parse_one_group(args)? {
        let usage = match change {
            None => with_queue(ctx, queue, Access::Read, |store| {
                quota::group_usage(store, group)
            })?,
            Some(n) => {
                cluster::check_stable(queue)?;
                with_queue(ctx, queue, Access::ReadWrite, |store| {
                    quota::set_group(store, group, n)
                })?
            }
        };
        return Ok(group_fields(group, &usage));
    }
    let change = parse_change(args)?;
    let usage = match change {
        None => with_queue(ctx, queue, Access::Read, |store| limit::usage(store))?,
        Some(change) => {
            cluster::check_stable(queue)?;
            with_queue(ctx, queue, Access::ReadWrite, |store| {
                limit::set(store, change)
            })?
        }
    };
    let mut fields = vec![("active", Reply::Integer(usage.active as i64))];
    fields.extend(usage_fields(&usage));
    Ok(Reply::Map(fields))
}
