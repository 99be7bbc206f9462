//! One step of `SCAN` over the context's database, through the server: its cursor is a
//! number, so a walk of the keyspace resumes at a later call (the module API's scan cursor
//! cannot be handed back by a client, and holds a pointer).

use valkey_module::{CallOptionsBuilder, CallReply, CallResult, Context};

use crate::protocol::EmqError;

/// `SCAN cursor MATCH pattern COUNT count`: the next cursor (0: the walk is over) and the
/// names of the keys it returned.
pub fn scan_step(
    ctx: &Context,
    cursor: u64,
    pattern: &[u8],
    count: usize,
) -> Result<(u64, Vec<Vec<u8>>), EmqError> {
    let (cursor, count) = (cursor.to_string(), count.to_string());
    let args: [&[u8]; 5] = [
        cursor.as_bytes(),
        b"MATCH",
        pattern,
        b"COUNT",
        count.as_bytes(),
    ];
    let options = CallOptionsBuilder::new().no_writes().build();
    let reply: CallResult = ctx.call_ext("SCAN", &options, &args[..]);
    let Ok(CallReply::Array(reply)) = reply else {
        return Err(EmqError::Internal);
    };
    let next = match reply.get(0) {
        Some(Ok(CallReply::String(s))) => std::str::from_utf8(s.as_bytes())
            .ok()
            .and_then(|c| c.parse::<u64>().ok()),
        _ => None,
    }
    .ok_or(EmqError::Internal)?;
    let Some(Ok(CallReply::Array(items))) = reply.get(1) else {
        return Err(EmqError::Internal);
    };
    let names = items
        .iter()
        .filter_map(|item| match item {
            Ok(CallReply::String(s)) => Some(s.as_bytes().to_vec()),
            _ => None,
        })
        .collect();
    Ok((next, names))
}
