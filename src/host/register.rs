//! Turns the command descriptors (each `commands/<name>.rs` declares its own [`Command`]; `lib.rs`
//! lists them) into server registrations: the command, its key spec, `COMMAND DOCS` (summary,
//! complexity, arguments) and its ACL category; and finds the ACL rules
//! that name those commands (which the server cannot unload a module under). The crate's
//! `valkey_module!` macro would do the registration, but it `unwrap()`s API pointers that
//! Redis 7.0 lacks and has no way to document arguments this fully.

use std::ffi::CStr;
use std::mem::size_of;
use std::os::raw::{c_char, c_int};
use std::ptr;

use valkey_module::{raw, Context, ValkeyValue};

use super::guard::Callback;
use super::server::{log, reply_text};

/// How a command argument is documented.
#[derive(Clone, Copy)]
pub enum ArgKind {
    String,
    Integer,
    /// A group of arguments that go together (`id payload`).
    Block(&'static [Arg]),
    /// Exactly one of the arguments (`DELAY <ms> | AT <unix-ms>`).
    OneOf(&'static [Arg]),
    /// A keyword with no value (`WITHPAYLOADS`, `DEAD`, `OFF`); the argument's token is the
    /// keyword.
    PureToken,
}

pub struct Arg {
    pub name: &'static CStr,
    pub kind: ArgKind,
    /// The keyword that introduces an optional argument (`COUNT 10`).
    pub token: Option<&'static CStr>,
    pub optional: bool,
    pub multiple: bool,
}

impl Arg {
    /// An optional `TOKEN value` pair.
    pub const fn token(name: &'static CStr, token: &'static CStr, kind: ArgKind) -> Self {
        Self {
            name,
            kind,
            token: Some(token),
            optional: true,
            multiple: false,
        }
    }

    /// A `TOKEN value` pair that is one choice of a [`ArgKind::OneOf`].
    pub const fn keyword(name: &'static CStr, token: &'static CStr, kind: ArgKind) -> Self {
        Self {
            name,
            kind,
            token: Some(token),
            optional: false,
            multiple: false,
        }
    }

    /// Repeated values (`id payload [id payload ...]`).
    pub const fn multiple(name: &'static CStr, kind: ArgKind) -> Self {
        Self {
            name,
            kind,
            token: None,
            optional: false,
            multiple: true,
        }
    }

    /// A keyword with no value, one choice of a [`ArgKind::OneOf`] (`FAIL`).
    pub const fn pure(name: &'static CStr, token: &'static CStr) -> Self {
        Self {
            name,
            kind: ArgKind::PureToken,
            token: Some(token),
            optional: false,
            multiple: false,
        }
    }

    /// An optional argument that may be given again and again (`[PARENT <queue> <id>] ...`).
    pub const fn optional_multiple(name: &'static CStr, kind: ArgKind) -> Self {
        Self {
            name,
            kind,
            token: None,
            optional: true,
            multiple: true,
        }
    }

    pub const fn required(name: &'static CStr, kind: ArgKind) -> Self {
        Self {
            name,
            kind,
            token: None,
            optional: false,
            multiple: false,
        }
    }

    pub const fn optional(name: &'static CStr, kind: ArgKind) -> Self {
        Self {
            name,
            kind,
            token: None,
            optional: true,
            multiple: false,
        }
    }
}

/// A command as the server is told of it: a `commands/<name>.rs` declares its own, next to its
/// parser, with its handler wrapped by `callback!`.
pub struct Command {
    pub name: &'static CStr,
    pub callback: Callback,
    pub flags: &'static CStr,
    pub arity: c_int,
    /// Argument 1 is the queue: routed like a key (`NotKey`), so the server answers `-MOVED`
    /// and cluster clients route by it, while the handler checks ACL on the derived keys.
    pub routes_by_queue: bool,
    pub summary: &'static CStr,
    pub complexity: &'static CStr,
    pub args: &'static [Arg],
}

const COMMAND_INFO_VERSION: raw::RedisModuleCommandInfoVersion =
    raw::RedisModuleCommandInfoVersion {
        version: 1,
        sizeof_historyentry: size_of::<raw::RedisModuleCommandHistoryEntry>(),
        sizeof_keyspec: size_of::<raw::RedisModuleCommandKeySpec>(),
        sizeof_arg: size_of::<raw::RedisModuleCommandArg>(),
    };

/// The queue argument's key spec: read-only access for a `readonly` command (`EMQ.STATS`),
/// read-write update for the others, as the derived keys are used.
fn queue_key_spec(read_only: bool) -> raw::RedisModuleCommandKeySpec {
    // SAFETY: the key spec is plain old data; zero is its documented terminator/default.
    let mut spec: raw::RedisModuleCommandKeySpec = unsafe { std::mem::zeroed() };
    spec.notes = c"the queue name, routed as its own hashtag; ACL is checked on the derived emq:{queue}:* keys".as_ptr();
    let access = if read_only {
        raw::REDISMODULE_CMD_KEY_RO | raw::REDISMODULE_CMD_KEY_ACCESS
    } else {
        raw::REDISMODULE_CMD_KEY_RW | raw::REDISMODULE_CMD_KEY_UPDATE
    };
    spec.flags = u64::from(access | raw::REDISMODULE_CMD_KEY_NOT_KEY);
    spec.begin_search_type = raw::RedisModuleKeySpecBeginSearchType_REDISMODULE_KSPEC_BS_INDEX;
    spec.bs.index.pos = 1;
    spec.find_keys_type = raw::RedisModuleKeySpecFindKeysType_REDISMODULE_KSPEC_FK_RANGE;
    spec.fk.range.lastkey = 0;
    spec.fk.range.keystep = 1;
    spec.fk.range.limit = 0;
    spec
}

fn doc_arg(arg: &Arg) -> raw::RedisModuleCommandArg {
    // SAFETY: plain old data; zero means "absent" for every pointer field.
    let mut out: raw::RedisModuleCommandArg = unsafe { std::mem::zeroed() };
    out.name = arg.name.as_ptr();
    out.type_ = match arg.kind {
        ArgKind::String => raw::RedisModuleCommandArgType_REDISMODULE_ARG_TYPE_STRING,
        ArgKind::Integer => raw::RedisModuleCommandArgType_REDISMODULE_ARG_TYPE_INTEGER,
        ArgKind::Block(_) => raw::RedisModuleCommandArgType_REDISMODULE_ARG_TYPE_BLOCK,
        ArgKind::OneOf(_) => raw::RedisModuleCommandArgType_REDISMODULE_ARG_TYPE_ONEOF,
        ArgKind::PureToken => raw::RedisModuleCommandArgType_REDISMODULE_ARG_TYPE_PURE_TOKEN,
    };
    out.key_spec_index = -1;
    if let Some(token) = arg.token {
        out.token = token.as_ptr();
    }
    let mut flags = raw::REDISMODULE_CMD_ARG_NONE;
    if arg.optional {
        flags |= raw::REDISMODULE_CMD_ARG_OPTIONAL;
    }
    if arg.multiple {
        flags |= raw::REDISMODULE_CMD_ARG_MULTIPLE;
    }
    out.flags = flags as c_int;
    out
}

/// Registers the `emq` ACL category where the server has them (Valkey 8 / Redis 7.4+). The
/// server never removes a category, so after an unload it is already there (`EBUSY`), and the
/// commands loaded again join it.
pub fn acl_category(ctx: &Context, name: &CStr) {
    match unsafe { raw::RedisModule_AddACLCategory } {
        // SAFETY: called from OnLoad with a NUL-terminated name.
        Some(add) => {
            if unsafe { add(ctx.ctx, name.as_ptr()) } != raw::REDISMODULE_OK as c_int {
                let why = std::io::Error::last_os_error();
                if why.kind() != std::io::ErrorKind::ResourceBusy {
                    log(
                        ctx,
                        c"warning",
                        &format!("EchoMQ: could not add the emq ACL category: {why}"),
                    );
                }
            }
        }
        None => log(
            ctx,
            c"notice",
            "EchoMQ: this server has no module ACL categories; skipping @emq",
        ),
    }
}

/// Creates every command of `table`, with key specs, docs and the ACL category.
pub fn commands(ctx: &Context, table: &[Command], acl: &CStr) -> Result<(), String> {
    let create = unsafe { raw::RedisModule_CreateCommand }.ok_or("no CreateCommand API")?;
    for cmd in table {
        let name = cmd.name.to_string_lossy();
        // SAFETY: OnLoad context; names and flags are static NUL-terminated strings.
        let status = unsafe {
            create(
                ctx.ctx,
                cmd.name.as_ptr(),
                Some(cmd.callback),
                cmd.flags.as_ptr(),
                0,
                0,
                0,
            )
        };
        if status != raw::REDISMODULE_OK as c_int {
            return Err(format!("could not create {name}"));
        }
        let Some(get) = (unsafe { raw::RedisModule_GetCommand }) else {
            continue;
        };
        // SAFETY: the command was just created under this name.
        let handle = unsafe { get(ctx.ctx, cmd.name.as_ptr()) };
        if handle.is_null() {
            return Err(format!("could not find {name} after creating it"));
        }
        set_info(handle, cmd).map_err(|e| format!("{name}: {e}"))?;
        if let Some(set_acl) = unsafe { raw::RedisModule_SetCommandACLCategories } {
            // SAFETY: a live command handle and a NUL-terminated category list.
            if unsafe { set_acl(handle, acl.as_ptr()) } != raw::REDISMODULE_OK as c_int {
                return Err(format!("could not put {name} in its ACL category"));
            }
        }
    }
    Ok(())
}

/// The documented form of `args`, zero-terminated; the lists of their members go to `lists`,
/// which must outlive the registration (a boxed slice never moves).
fn doc_args(
    args: &[Arg],
    lists: &mut Vec<Box<[raw::RedisModuleCommandArg]>>,
) -> Box<[raw::RedisModuleCommandArg]> {
    args.iter()
        .map(|a| {
            let mut doc = doc_arg(a);
            if let ArgKind::Block(members) | ArgKind::OneOf(members) = a.kind {
                let mut list = doc_args(members, lists);
                doc.subargs = list.as_mut_ptr();
                lists.push(list);
            }
            doc
        })
        // SAFETY: the zeroed arg terminates the list.
        .chain(std::iter::once(unsafe { std::mem::zeroed() }))
        .collect()
}

fn set_info(handle: *mut raw::RedisModuleCommand, cmd: &Command) -> Result<(), &'static str> {
    let Some(set) = (unsafe { raw::RedisModule_SetCommandInfo }) else {
        return Ok(());
    };
    let mut key_specs = Vec::with_capacity(2);
    if cmd.routes_by_queue {
        let read_only = cmd
            .flags
            .to_bytes()
            .split(|&b| b == b' ')
            .any(|flag| flag == b"readonly");
        key_specs.push(queue_key_spec(read_only));
    }
    // SAFETY: the zeroed spec terminates the list.
    key_specs.push(unsafe { std::mem::zeroed() });
    // Every argument list (the command's, and each block's or choice's members, nested as deep
    // as they go), zero-terminated; kept alive until the server has copied them.
    let mut lists = Vec::new();
    let mut args = doc_args(cmd.args, &mut lists);
    let info = raw::RedisModuleCommandInfo {
        version: &COMMAND_INFO_VERSION,
        summary: cmd.summary.as_ptr(),
        complexity: cmd.complexity.as_ptr(),
        since: c"0.1.0".as_ptr(),
        history: ptr::null_mut(),
        tips: ptr::null::<c_char>(),
        arity: cmd.arity,
        key_specs: key_specs.as_mut_ptr(),
        args: if cmd.args.is_empty() {
            ptr::null_mut()
        } else {
            args.as_mut_ptr()
        },
    };
    // SAFETY: every pointer lives until the call returns; the server copies what it keeps.
    if unsafe { set(handle, &info) } != raw::REDISMODULE_OK as c_int {
        return Err("the server refused its command info");
    }
    Ok(())
}

/// The rules of `ACL LIST` that name one of EchoMQ's commands, as `<user> <rule>`.
pub fn acl_rules_naming_commands(ctx: &Context) -> Vec<String> {
    let Ok(ValkeyValue::Array(users)) = ctx.call("ACL", &["LIST"]) else {
        return Vec::new();
    };
    users
        .iter()
        .filter_map(reply_text)
        .flat_map(|line| {
            let user = line.split_whitespace().nth(1).unwrap_or("?").to_string();
            command_rules(&line)
                .into_iter()
                .map(|rule| format!("{user} {rule}"))
                .collect::<Vec<_>>()
        })
        .collect()
}

/// The rules of one `ACL LIST` line that name an `emq.*` command, selectors' included
/// (`+emq.enqueue`, `(~k -emq.ack)`); a category rule such as `+@emq` names none.
fn command_rules(line: &str) -> Vec<&str> {
    line.split_whitespace()
        .map(|token| token.trim_start_matches('(').trim_end_matches(')'))
        .filter(|rule| {
            rule.strip_prefix(['+', '-']).is_some_and(|name| {
                name.get(..4)
                    .is_some_and(|head| head.eq_ignore_ascii_case("emq."))
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::command_rules;

    #[test]
    fn acl_rules_that_name_commands_are_found() {
        assert_eq!(
            command_rules("user w on nopass ~* resetchannels -@all +emq.enqueue +EMQ.Ack"),
            ["+emq.enqueue", "+EMQ.Ack"]
        );
        assert_eq!(
            command_rules("user w on nopass ~* +@all (~emq:* -emq.claim)"),
            ["-emq.claim"]
        );
        assert!(command_rules("user w on nopass ~emq:* +@all -@emq +@emq").is_empty());
        assert!(command_rules("user default on nopass ~* &* +@all").is_empty());
        assert!(command_rules("user emq.x on nopass ~emq.x +get").is_empty());
    }
}
