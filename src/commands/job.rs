//! `EMQ.JOB <queue> <id>`: one job as a map of its row's fields (its headers a map of their
//! own) and the set that holds it with its score there; null when it has neither.

use valkey_module::Context;

use super::cursor::check_arity;
use super::{parse_id, parse_queue, ID, QUEUE};
use crate::host::acl::Access;
use crate::host::register::Command;
use crate::host::reply::{Args, CommandResult, Reply};
use crate::host::store::with_queue;
use crate::host::string::Text;
use crate::protocol::job::{attempts_from, priority_from};
use crate::protocol::{EmqError, Field};
use crate::queue::inspect::{self, field_name, score_name, set_word, Score};
use crate::queue::Job;

pub const COMMAND: Command = Command {
    name: c"emq.job",
    callback: crate::callback!(run),
    flags: c"readonly",
    arity: 3,
    routes_by_queue: true,
    summary: c"One job: its row's fields, the set that holds it and its score there",
    complexity: c"O(log(N)) with N the jobs in the queue's sets",
    args: &[QUEUE, ID],
};

pub fn run(ctx: &Context, args: &Args) -> CommandResult {
    check_arity(args, &COMMAND)?;
    let queue = parse_queue(args.bytes(1))?;
    let id = parse_id(args.bytes(2))?;
    let member = args.string(2).ok_or(EmqError::Internal)?;
    with_queue(ctx, queue, Access::Read, |store| {
        let member = Text::Borrowed(member);
        let job = Job {
            id,
            member: &member,
        };
        let Some(view) = inspect::job(store, &job)? else {
            return Ok(Reply::Null);
        };
        let mut map = Vec::with_capacity(2 + view.row.len() + 1);
        map.push(("id", Reply::Bulk(member.bytes().to_vec())));
        for (field, value) in &view.row {
            let value = match field {
                Field::Attempts => Reply::Integer(attempts_from(Some(value.bytes()))),
                Field::Priority => Reply::Integer(priority_from(Some(value.bytes()))),
                Field::Headers => Reply::Headers(value.bytes().to_vec()),
                _ => Reply::Bulk(value.bytes().to_vec()),
            };
            map.push((field_name(*field), value));
        }
        match view.place {
            None => map.push(("set", Reply::Null)),
            Some((set, score)) => {
                map.push(("set", Reply::Bulk(set_word(set).as_bytes().to_vec())));
                if let Some(name) = score_name(set) {
                    map.push((name, score_reply(score)));
                }
            }
        }
        Ok(Reply::Map(map))
    })
}

/// A score in a reply: an integer, or the text of one written by hand that is not whole.
pub fn score_reply(score: f64) -> Reply {
    match inspect::show_score(score) {
        Score::Int(n) => Reply::Integer(n),
        Score::Text(t) => Reply::Bulk(t.into_bytes()),
    }
}
