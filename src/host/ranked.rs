//! The host's [`Ranked`]: a queue's set read by rank through the server's own `ZCOUNT` and
//! `ZRANGE` (the module API has no rank and no seek inside a run of equal scores), called with
//! `Context::call_ext`, and rows opened read-only. Each call is one O(log N) read of a zset
//! the command has already opened and type-checked; its members come back as bytes (the
//! crate's `ValkeyValue` conversion would panic on a member that is not UTF-8).

use valkey_module::{CallOptionResp, CallOptions, CallOptionsBuilder, CallReply, CallResult};

use crate::protocol::{EmqError, Ranked, Set};

use super::key::Key;
use super::server::log;
use super::store::ServerStore;
use super::string::{OwnedString, Text};

/// Reads only, errors as replies (not a null reply and `errno`), RESP2 (a flat
/// `member, score` array).
fn read_only() -> CallOptions {
    CallOptionsBuilder::new()
        .no_writes()
        .errors_as_replies()
        .resp(CallOptionResp::Resp2)
        .build()
}

/// A score as the server's range arguments parse it back to the same double: Rust prints
/// the shortest text that round-trips (`inf` and `-inf` included).
fn score_arg(score: f64, inclusive: bool) -> String {
    match inclusive {
        true => format!("{score}"),
        false => format!("({score}"),
    }
}

impl<'a> ServerStore<'_, 'a> {
    /// `<command> <set> <args...>` through the server, on a set that is open; a failure is
    /// logged with the server's words and answered as `Internal`.
    fn read_set(
        &self,
        set: Set,
        command: &str,
        args: &[&[u8]],
    ) -> Result<CallReply<'static>, EmqError> {
        let name = self.set_name(set)?;
        let mut argv: Vec<&[u8]> = Vec::with_capacity(1 + args.len());
        argv.push(name.bytes());
        argv.extend_from_slice(args);
        let reply: CallResult<'static> =
            self.ctx()
                .call_ext::<_, CallResult<'static>>(command, &read_only(), argv.as_slice());
        let why = match reply {
            Ok(CallReply::Unknown) => "no reply".to_string(),
            Ok(reply) => return Ok(reply),
            Err(e) => String::from_utf8_lossy(e.as_bytes()).into_owned(),
        };
        log(
            self.ctx(),
            c"warning",
            &format!(
                "EchoMQ: {command} {} failed: {why}",
                String::from_utf8_lossy(name.bytes())
            ),
        );
        Err(EmqError::Internal)
    }
}

impl<'a> Ranked for ServerStore<'_, 'a> {
    fn count_below(&self, set: Set, score: f64, inclusive: bool) -> Result<u64, EmqError> {
        if self.set(set)?.is_empty() {
            return Ok(0);
        }
        let max = score_arg(score, inclusive);
        match self.read_set(set, "ZCOUNT", &[b"-inf", max.as_bytes()])? {
            CallReply::I64(n) => u64::try_from(n.to_i64()).map_err(|_| EmqError::Internal),
            _ => Err(EmqError::Internal),
        }
    }

    fn range_by_rank(
        &self,
        set: Set,
        start: u64,
        stop: u64,
    ) -> Result<Vec<(Text<'a>, f64)>, EmqError> {
        let len = self.set(set)?.len();
        if start > stop || start >= len {
            return Ok(Vec::new());
        }
        let (start, stop) = (start.to_string(), stop.min(len - 1).to_string());
        let CallReply::Array(items) = self.read_set(
            set,
            "ZRANGE",
            &[start.as_bytes(), stop.as_bytes(), b"WITHSCORES"],
        )?
        else {
            return Err(EmqError::Internal);
        };
        let mut out = Vec::with_capacity(items.len() / 2);
        let mut items = items.iter();
        while let Some(member) = items.next() {
            let (Ok(CallReply::String(member)), Some(Ok(CallReply::String(score)))) =
                (member, items.next())
            else {
                return Err(EmqError::Internal);
            };
            let score = std::str::from_utf8(score.as_bytes())
                .ok()
                .and_then(|s| s.parse::<f64>().ok())
                .ok_or(EmqError::Internal)?;
            let member = OwnedString::new(self.ctx(), member.as_bytes())?;
            out.push((Text::Owned(member), score));
        }
        Ok(out)
    }

    fn read_row<'n>(&'n self, row: &'n OwnedString) -> Result<Key<'n>, EmqError> {
        Key::open_read(self.ctx(), row)
    }
}
