//! `EMQ.LIMIT <queue> [CONCURRENCY <n>|OFF] [RATE <n> PER <ms> | RATE OFF] [TIMEOUT <ms>|OFF]
//! [GROUP-CONCURRENCY <n>|OFF] | EMQ.LIMIT <queue> OFF`: sets or removes the queue's limits;
//! with no option, reports them. Either way the reply is the limits and their use now.
//! `EMQ.LIMIT <queue> GROUP <group> [CONCURRENCY <n>|OFF]` does the same for one group's own.

use valkey_module::Context;

use super::cursor::{check_arity, syntax, ArgCursor};
use super::{is_token, parse_int, parse_queue, QUEUE};
use crate::host::acl::Access;
use crate::host::register::{
    Arg, ArgKind, ArgKind::Block, ArgKind::Integer as Int, ArgKind::OneOf,
    ArgKind::PureToken as Pure, ArgKind::String as Str, Command,
};
use crate::host::reply::{Args, CommandResult, Reply};
use crate::host::store::with_queue;
use crate::protocol::limits::{Rate, MAX_CONCURRENCY, MAX_PER_MS, MAX_RATE, MAX_TIMEOUT_MS};
use crate::protocol::EmqError;
use crate::queue::group_limit::{self, GroupChange, GroupUsage};
use crate::queue::limit::{self, Change, Usage};
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

/// `RATE <n> PER <ms> | RATE OFF`, its name read: the rate, or `None` for `OFF`.
fn rate_or_off(
    options: &mut ArgCursor<'_, '_>,
    name: &'static str,
) -> Result<Option<Rate>, EmqError> {
    if options.next_is("OFF") {
        return Ok(None);
    }
    options.expect_values(3)?;
    let n = options.next_int(1, MAX_RATE, name)?;
    if !options.next_is("PER") {
        return Err(EmqError::Syntax(
            format!("syntax error: expected {name} <n> PER <ms>").into(),
        ));
    }
    let per_ms = options.next_int(1, MAX_PER_MS, "PER")?;
    Ok(Some(Rate { n, per_ms }))
}

/// A group named after `GROUP`, and its change (`None`: a report).
type OneGroup<'a> = (&'a [u8], Option<GroupChange>);

/// `GROUP <group> [CONCURRENCY <n>|OFF] [RATE <n> PER <ms>|RATE OFF]`: the group, and its
/// change (`None`: a report).
fn parse_one_group<'a>(args: &Args<'a>) -> Result<Option<OneGroup<'a>>, EmqError> {
    if args.len() < 4 || !is_token(args.bytes(2), "GROUP") {
        return Ok(None);
    }
    let group = super::parse_group(args.bytes(3))?.as_bytes();
    if args.len() == 4 {
        return Ok(Some((group, None)));
    }
    let mut change = GroupChange::default();
    let mut options = ArgCursor::new(args, 4);
    while let Some(name) = options.next_word() {
        if is_token(name, "CONCURRENCY") && change.concurrency.is_none() {
            change.concurrency = Some(int_or_off(&mut options, MAX_CONCURRENCY, "CONCURRENCY")?);
        } else if is_token(name, "RATE") && change.rate.is_none() {
            change.rate = Some(rate_or_off(&mut options, "RATE")?);
        } else {
            return Err(syntax(
                "syntax error: expected GROUP <group> [CONCURRENCY <n>|OFF] [RATE <n> PER <ms>|RATE OFF]",
            ));
        }
    }
    Ok(Some((group, Some(change))))
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
            change.rate = Some(rate_or_off(&mut options, "RATE")?);
        } else if is_token(name, "TIMEOUT") && change.timeout.is_none() {
            change.timeout = Some(int_or_off(&mut options, MAX_TIMEOUT_MS, "TIMEOUT")?);
        } else if is_token(name, "GROUP-CONCURRENCY") && change.group_concurrency.is_none() {
            change.group_concurrency = Some(int_or_off(
                &mut options,
                MAX_CONCURRENCY,
                "GROUP-CONCURRENCY",
            )?);
        } else if is_token(name, "GROUP-RATE") && change.group_rate.is_none() {
            change.group_rate = Some(rate_or_off(&mut options, "GROUP-RATE")?);
        } else {
            return Err(syntax(
                "syntax error: expected CONCURRENCY <n>|OFF, RATE <n> PER <ms>|OFF, TIMEOUT <ms>|OFF, GROUP-CONCURRENCY <n>|OFF, GROUP-RATE <n> PER <ms>|OFF, or OFF alone, or GROUP <group> [CONCURRENCY <n>|OFF] [RATE <n> PER <ms>|OFF]",
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
        ("group-rate", opt(usage.limits.group_rate.map(|r| r.n))),
        (
            "group-rate-per",
            opt(usage.limits.group_rate.map(|r| r.per_ms)),
        ),
    ]
}

/// One group's limits and their use, as `EMQ.LIMIT <queue> GROUP <g>` replies.
fn group_fields(group: &[u8], usage: &GroupUsage) -> Reply {
    let opt = |v: Option<i64>| v.map_or(Reply::Null, Reply::Integer);
    let (own, defaults) = (&usage.own, &usage.defaults);
    Reply::Map(vec![
        ("group", Reply::Bulk(group.to_vec())),
        ("active", Reply::Integer(usage.active as i64)),
        ("ready", Reply::Integer(usage.ready as i64)),
        ("concurrency", opt(own.concurrency)),
        ("rate", opt(own.rate.map(|r| r.n))),
        ("rate-per", opt(own.rate.map(|r| r.per_ms))),
        ("rate-used", Reply::Integer(usage.in_window as i64)),
        ("group-concurrency", opt(defaults.concurrency)),
        ("group-rate", opt(defaults.rate.map(|r| r.n))),
        ("group-rate-per", opt(defaults.rate.map(|r| r.per_ms))),
        ("held", Reply::Integer(i64::from(usage.held))),
    ])
}

/// `<n> | OFF`, after `CONCURRENCY` or `GROUP-CONCURRENCY`.
const N_OR_OFF: ArgKind = OneOf(&[Arg::required(c"n", Int), Arg::keyword(c"off", c"OFF", Pure)]);

/// `<n> PER <ms> | OFF`, after `RATE` or `GROUP-RATE`.
const RATE_OR_OFF: ArgKind = OneOf(&[
    Arg::required(
        c"window",
        Block(&[Arg::required(c"n", Int), Arg::keyword(c"per", c"PER", Int)]),
    ),
    Arg::keyword(c"off", c"OFF", Pure),
]);

pub const COMMAND: Command = Command {
    name: c"emq.limit",
    callback: crate::callback!(run),
    flags: c"write deny-oom fast",
    arity: -2,
    routes_by_queue: true,
    summary: c"Set (or with no option, report) the queue's concurrency and sliding-window rate limits, its default limit on one attempt's time and its groups' concurrency and rate limits; replies the limits and their use",
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
                        Arg::token(c"concurrency", c"CONCURRENCY", N_OR_OFF),
                        Arg::token(c"rate", c"RATE", RATE_OR_OFF),
                        Arg::token(
                            c"timeout",
                            c"TIMEOUT",
                            OneOf(&[
                                Arg::required(c"ms", Int),
                                Arg::keyword(c"off", c"OFF", Pure),
                            ]),
                        ),
                        Arg::token(c"group-concurrency", c"GROUP-CONCURRENCY", N_OR_OFF),
                        Arg::token(c"group-rate", c"GROUP-RATE", RATE_OR_OFF),
                    ]),
                ),
                Arg::required(
                    c"one-group",
                    Block(&[
                        Arg::keyword(c"group", c"GROUP", Str),
                        Arg::token(c"concurrency", c"CONCURRENCY", N_OR_OFF),
                        Arg::token(c"rate", c"RATE", RATE_OR_OFF),
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
                group_limit::usage(store, group)
            })?,
            Some(change) => {
                cluster::check_stable(queue)?;
                with_queue(ctx, queue, Access::ReadWrite, |store| {
                    group_limit::set(store, group, change)
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
