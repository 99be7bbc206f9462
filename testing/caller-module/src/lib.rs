//! A test-only module for EchoMQ's suites: it calls a command through `RM_Call`, the way any
//! other module would, either with the calling client's ACL (`AS-CALLER`, the `C` flag) or
//! with none (`AS-ROOT`, the server's default for module calls).
//!
//! `EMQCALLER.CALL <AS-CALLER|AS-ROOT> <command> [<arg> ...]` replies what the command replied.

use valkey_module::alloc::ValkeyAlloc;
use valkey_module::{
    valkey_module, CallOptionsBuilder, CallResult, Context, ValkeyError, ValkeyResult,
    ValkeyString, ValkeyValue,
};

fn call(ctx: &Context, args: Vec<ValkeyString>) -> ValkeyResult {
    let [_, mode, command, rest @ ..] = args.as_slice() else {
        return Err(ValkeyError::WrongArity);
    };
    let options = match mode.as_slice() {
        b"AS-CALLER" => CallOptionsBuilder::new().verify_acl(),
        b"AS-ROOT" => CallOptionsBuilder::new(),
        _ => return Err(ValkeyError::Str("ERR the mode is AS-CALLER or AS-ROOT")),
    }
    .errors_as_replies()
    .build();
    let rest: Vec<&ValkeyString> = rest.iter().collect();
    let reply: CallResult = ctx.call_ext(&command.to_string_lossy(), &options, rest.as_slice());
    match reply {
        Ok(reply) => Ok(ValkeyValue::from(&reply)),
        Err(err) => Err(ValkeyError::from(err)),
    }
}

valkey_module! {
    name: "emqcaller",
    version: 1,
    allocator: (ValkeyAlloc, ValkeyAlloc),
    data_types: [],
    commands: [
        ["emqcaller.call", call, "write", 0, 0, 0],
    ],
}
