//! The queue's event stream (`events`, protocol.md): whether it is on, read once a call from
//! `meta`, and each entry appended with the server's own `XADD`.

use valkey_module::{CallOptionsBuilder, CallResult};

use super::super::acl::{check_permission, Access};
use super::super::key::Key;
use super::super::meta_cache;
use super::ServerStore;
use crate::protocol::{EmqError, Holds, Meta, Store};

impl ServerStore<'_, '_> {
    /// The event stream's cap (`None`: off), read once a call; its key checked when on.
    #[inline(always)]
    pub(super) fn stream_cap(&self) -> Result<Option<u64>, EmqError> {
        if self.access == Access::ReadWrite && !meta_cache::may_exist() {
            return Ok(None); // no meta hash, so no stream on (see `meta_cache::may_exist`)
        }
        if let Some(cap) = self.events.get() {
            return Ok(*cap);
        }
        let cap = match self.meta(Meta::Events)? {
            Some(text) => std::str::from_utf8(&text)
                .ok()
                .and_then(|t| t.parse::<u64>().ok())
                .filter(|cap| *cap > 0),
            None => None,
        };
        if cap.is_some() {
            let name = self.names.events()?;
            check_permission(self.ctx, [Ok((name, Access::ReadWrite))].into_iter())?;
            if !matches!(
                Key::probe(self.ctx, name)?.holds(),
                Holds::Nothing | Holds::Stream
            ) {
                return Err(EmqError::WrongType);
            }
        }
        Ok(*self.events.get_or_init(|| cap))
    }

    /// Appends an entry of `fields` to the stream, trimmed to about `cap` entries.
    #[inline]
    pub(super) fn append_to_stream(
        &self,
        cap: u64,
        fields: &[(&[u8], &[u8])],
    ) -> Result<(), EmqError> {
        let name = self.names.events()?;
        let cap = cap.to_string();
        let mut args: Vec<&[u8]> = Vec::with_capacity(5 + fields.len() * 2);
        args.extend([name.bytes(), b"MAXLEN", b"~", cap.as_bytes(), b"*"]);
        for (field, value) in fields {
            args.push(field);
            args.push(value);
        }
        // The server's own XADD, replicated as the server rewrites it (with the entry's id and
        // the trim made exact), among this call's other effects.
        let options = CallOptionsBuilder::new().replicate().build();
        let reply: CallResult = self.ctx.call_ext("XADD", &options, args.as_slice());
        reply.map(|_| ()).map_err(|_| EmqError::Internal)
    }
}
