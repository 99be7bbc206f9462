//! A test-only module for EchoMQ's suites: it calls a command through `RM_Call`, the way any
//! other module would, either with the calling client's ACL (`AS-CALLER`, the `C` flag) or
//! with none (`AS-ROOT`, the server's default for module calls).
//!
//! `EMQCALLER.CALL <AS-CALLER|AS-ROOT|AS-ROOT-BLOCKING> <command> [<arg> ...]` replies what the
//! command replied, passed on untouched (`RM_ReplyWithCallReply`), errors included. With
//! `AS-ROOT-BLOCKING` (the `K` flag) a command may block: the reply is then `PROMISE`, and the
//! command's eventual reply is dropped when it comes.
//!
//! `EMQCALLER.HEARD` replies the zset and generic keyspace events this module heard, oldest
//! first, each as `<event> <key>` (at most the last 1000), and forgets them: what another
//! module subscribed to keyspace events learns of EchoMQ's writes.
//!
//! `EMQCALLER.LOGIN` authenticates the calling client as `emqcaller-user`, a user this module
//! creates (`RM_CreateModuleUser`: outside the server's ACL list) with every right.

use std::os::raw::c_char;
use std::ptr;
use std::sync::atomic::{AtomicPtr, Ordering};
use std::sync::Mutex;

use valkey_module::alloc::ValkeyAlloc;
use valkey_module::{
    raw, valkey_module, Context, NotifyEvent, ValkeyError, ValkeyResult, ValkeyString, ValkeyValue,
};

fn call(ctx: &Context, args: Vec<ValkeyString>) -> ValkeyResult {
    let [_, mode, command, rest @ ..] = args.as_slice() else {
        return Err(ValkeyError::WrongArity);
    };
    // "v": the arguments as an array; "E": errors come back as replies; "C": as the caller.
    let format: &[u8] = match mode.as_slice() {
        b"AS-CALLER" => b"vEC\0",
        b"AS-ROOT" => b"vE\0",
        b"AS-ROOT-BLOCKING" => b"vEK\0",
        _ => {
            return Err(ValkeyError::Str(
                "ERR the mode is AS-CALLER, AS-ROOT or AS-ROOT-BLOCKING",
            ))
        }
    };
    let mut name = command.as_slice().to_vec();
    name.push(0);
    let mut argv: Vec<*mut raw::RedisModuleString> = rest.iter().map(|a| a.inner).collect();
    let (Some(rm_call), Some(reply_with), Some(free)) = (unsafe {
        (
            raw::RedisModule_Call,
            raw::RedisModule_ReplyWithCallReply,
            raw::RedisModule_FreeCallReply,
        )
    }) else {
        return Err(ValkeyError::Str("ERR the server lacks RM_Call"));
    };
    // SAFETY: a command's context, NUL-terminated name and format, and `argv.len()` live
    // strings, as the "v" format expects.
    let reply = unsafe {
        rm_call(
            ctx.ctx,
            name.as_ptr().cast::<c_char>(),
            format.as_ptr().cast::<c_char>(),
            argv.as_mut_ptr(),
            argv.len(),
        )
    };
    if reply.is_null() {
        let errno = std::io::Error::last_os_error();
        return Err(ValkeyError::String(format!("ERR the call failed: {errno}")));
    }
    // SAFETY: a live reply, freed once (a promise lives on until its command replies).
    unsafe {
        if raw::RedisModule_CallReplyType
            .is_some_and(|kind| kind(reply) == raw::REDISMODULE_REPLY_PROMISE as i32)
        {
            if let Some(set_handler) = raw::RedisModule_CallReplyPromiseSetUnblockHandler {
                set_handler(reply, Some(drop_reply), ptr::null_mut());
            }
            free(reply);
            return Ok(ValkeyValue::SimpleStringStatic("PROMISE"));
        }
        reply_with(ctx.ctx, reply);
        free(reply);
    }
    Ok(ValkeyValue::NoReply)
}

/// A blocked call's eventual reply, which nobody waits for.
unsafe extern "C" fn drop_reply(
    _ctx: *mut raw::RedisModuleCtx,
    reply: *mut raw::RedisModuleCallReply,
    _private: *mut std::os::raw::c_void,
) {
    if let Some(free) = unsafe { raw::RedisModule_FreeCallReply } {
        // SAFETY: the server hands the reply over to this handler.
        unsafe { free(reply) };
    }
}

/// The module-created user, made on first use.
static USER: AtomicPtr<raw::RedisModuleUser> = AtomicPtr::new(ptr::null_mut());

fn login(ctx: &Context, _args: Vec<ValkeyString>) -> ValkeyResult {
    let (Some(create), Some(set_acl), Some(authenticate)) = (unsafe {
        (
            raw::RedisModule_CreateModuleUser,
            raw::RedisModule_SetModuleUserACL,
            raw::RedisModule_AuthenticateClientWithUser,
        )
    }) else {
        return Err(ValkeyError::Str("ERR the server lacks module users"));
    };
    let mut user = USER.load(Ordering::SeqCst);
    if user.is_null() {
        // SAFETY: NUL-terminated name and rules; the user lives as long as the module.
        unsafe {
            user = create(c"emqcaller-user".as_ptr());
            for rule in [c"on", c"~*", c"&*", c"+@all"] {
                set_acl(user, rule.as_ptr());
            }
        }
        USER.store(user, Ordering::SeqCst);
    }
    // SAFETY: a command's context and a live user; no callback.
    let status = unsafe { authenticate(ctx.ctx, user, None, ptr::null_mut(), ptr::null_mut()) };
    if status != raw::REDISMODULE_OK as i32 {
        return Err(ValkeyError::Str("ERR could not authenticate"));
    }
    Ok(ValkeyValue::SimpleStringStatic("OK"))
}

/// The keyspace events heard, oldest first.
static HEARD: Mutex<Vec<String>> = Mutex::new(Vec::new());
const HEARD_KEPT: usize = 1000;

fn on_keyspace(_ctx: &Context, _class: NotifyEvent, event: &str, key: &[u8]) {
    let mut heard = HEARD.lock().unwrap_or_else(|p| p.into_inner());
    if heard.len() >= HEARD_KEPT {
        heard.remove(0);
    }
    heard.push(format!("{event} {}", String::from_utf8_lossy(key)));
}

fn heard(_ctx: &Context, _args: Vec<ValkeyString>) -> ValkeyResult {
    let heard = std::mem::take(&mut *HEARD.lock().unwrap_or_else(|p| p.into_inner()));
    Ok(ValkeyValue::Array(
        heard.into_iter().map(ValkeyValue::BulkString).collect(),
    ))
}

valkey_module! {
    name: "emqcaller",
    version: 1,
    allocator: (ValkeyAlloc, ValkeyAlloc),
    data_types: [],
    commands: [
        ["emqcaller.call", call, "write", 0, 0, 0],
        ["emqcaller.login", login, "", 0, 0, 0],
        ["emqcaller.heard", heard, "", 0, 0, 0],
    ],
    event_handlers: [
        [@ZSET @GENERIC: on_keyspace],
    ],
}
