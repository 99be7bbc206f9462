//! A command's arguments in, its reply out.

use std::ffi::CString;
use std::os::raw::{c_char, c_long};
use std::ptr::NonNull;

use valkey_module::{raw, Context};

use crate::protocol::job::Claimed;
use crate::protocol::{counters, headers, EmqError};

use super::string::{string_bytes, Str};

/// A command's arguments, borrowed from the server for the duration of the call.
pub struct Args<'a> {
    argv: &'a [*mut raw::RedisModuleString],
}

impl<'a> Args<'a> {
    pub(crate) fn new(argv: &'a [*mut raw::RedisModuleString]) -> Self {
        Self { argv }
    }

    pub fn len(&self) -> usize {
        self.argv.len()
    }

    pub fn is_empty(&self) -> bool {
        self.argv.is_empty()
    }

    /// The bytes of argument `i` (0 is the command name); empty past the end.
    pub fn bytes(&self, i: usize) -> &'a [u8] {
        let Some(&s) = self.argv.get(i) else {
            return &[];
        };
        string_bytes(s)
    }

    /// The whole argument vector, command name first, as the server passed it.
    pub(crate) fn raw(&self) -> &'a [*mut raw::RedisModuleString] {
        self.argv
    }

    /// The server's own string for argument `i`, to hand back without copying.
    pub fn string(&self, i: usize) -> Option<Str<'a>> {
        let p = NonNull::new(*self.argv.get(i)?)?;
        // SAFETY: the server keeps its arguments alive for the whole call.
        Some(unsafe { Str::from_raw(p) })
    }
}

/// What a command answers.
#[derive(Debug, PartialEq)]
pub enum Reply {
    Integer(i64),
    Bulk(Vec<u8>),
    Null,
    Array(Vec<Reply>),
    /// A RESP3 map (a flat array under RESP2).
    Map(Vec<(&'static str, Reply)>),
    /// A job's `headers` field as a RESP3 map of its keys to their values (a flat array under
    /// RESP2).
    Headers(Vec<u8>),
    /// No reply now: the client is blocked and is answered later.
    Blocked,
    /// A refusal in one place of an array (`EMQ.MACK`'s stale token), counted as a refusal.
    Error(EmqError),
    /// The jobs a claim took, an array of `[id, payload, token]`, with the job's headers as a
    /// fourth element where it has some, written straight from the claim's one buffer.
    Jobs(Claimed),
}

pub type CommandResult = Result<Reply, EmqError>;

/// A command handler: pure parsing and checks, then at most one write through `store`.
pub type Handler = fn(&Context, &Args) -> CommandResult;

pub(crate) fn reply_error(ctx: *mut raw::RedisModuleCtx, err: &EmqError) {
    let text = CString::new(err.message().as_bytes())
        .unwrap_or_else(|_| CString::from(c"ERR invalid error text"));
    if let Some(f) = unsafe { raw::RedisModule_ReplyWithError } {
        // SAFETY: `ctx` is the live call context; `text` is NUL-terminated.
        unsafe { f(ctx, text.as_ptr()) };
    }
}

pub(crate) fn render(ctx: *mut raw::RedisModuleCtx, reply: &Reply) {
    // SAFETY (all calls): `ctx` is the live call context of this command.
    unsafe {
        match reply {
            Reply::Integer(n) => {
                if let Some(f) = raw::RedisModule_ReplyWithLongLong {
                    f(ctx, *n);
                }
            }
            Reply::Bulk(b) => bulk(ctx, b),
            Reply::Null => {
                if let Some(f) = raw::RedisModule_ReplyWithNull {
                    f(ctx);
                }
            }
            Reply::Array(items) => {
                if let Some(f) = raw::RedisModule_ReplyWithArray {
                    f(ctx, items.len() as c_long);
                }
                for item in items {
                    render(ctx, item);
                }
            }
            Reply::Jobs(jobs) => {
                if let Some(f) = raw::RedisModule_ReplyWithArray {
                    f(ctx, jobs.len() as c_long);
                }
                for job in jobs.iter() {
                    let headed = !job.headers.is_empty();
                    if let Some(f) = raw::RedisModule_ReplyWithArray {
                        f(ctx, 3 + c_long::from(headed));
                    }
                    bulk(ctx, job.id);
                    bulk(ctx, job.payload);
                    if let Some(f) = raw::RedisModule_ReplyWithLongLong {
                        f(ctx, job.token);
                    }
                    if headed {
                        header_map(ctx, job.headers);
                    }
                }
            }
            Reply::Headers(field) => header_map(ctx, field),
            Reply::Blocked => {}
            Reply::Error(err) => {
                counters::refused(err);
                reply_error(ctx, err);
            }
            Reply::Map(pairs) => {
                if let Some(f) = raw::RedisModule_ReplyWithMap {
                    f(ctx, pairs.len() as c_long);
                } else if let Some(f) = raw::RedisModule_ReplyWithArray {
                    f(ctx, (pairs.len() * 2) as c_long);
                }
                for (k, v) in pairs {
                    bulk(ctx, k.as_bytes());
                    render(ctx, v);
                }
            }
        }
    }
}

/// A `headers` field as a map of its keys to their values (a flat array under RESP2).
unsafe fn header_map(ctx: *mut raw::RedisModuleCtx, field: &[u8]) {
    let pairs = headers::decode(field).count() as c_long;
    if let Some(f) = raw::RedisModule_ReplyWithMap {
        f(ctx, pairs);
    } else if let Some(f) = raw::RedisModule_ReplyWithArray {
        f(ctx, pairs * 2);
    }
    for (key, value) in headers::decode(field) {
        bulk(ctx, key);
        bulk(ctx, value);
    }
}

unsafe fn bulk(ctx: *mut raw::RedisModuleCtx, b: &[u8]) {
    if let Some(f) = raw::RedisModule_ReplyWithStringBuffer {
        f(ctx, b.as_ptr().cast::<c_char>(), b.len());
    }
}
