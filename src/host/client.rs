//! The calling client and the context it runs in: its id and database, the context's flags,
//! and whether client writes are paused.

use std::os::raw::c_int;

use valkey_module::{raw, Context};

/// The id of the context's client (0 for none).
pub fn client_id(ctx: &Context) -> u64 {
    ctx.get_client_id()
}

/// The database selected on the context's client (the crate has no `GetSelectedDb`).
pub fn selected_db(ctx: &Context) -> i32 {
    match unsafe { raw::RedisModule_GetSelectedDb } {
        // SAFETY: live context.
        Some(f) => unsafe { f(ctx.ctx) },
        None => 0,
    }
}

/// Selects `db` on the context's client; whether the server took it (the crate has no
/// `SelectDb`).
pub fn select_db(ctx: &Context, db: i32) -> bool {
    match unsafe { raw::RedisModule_SelectDb } {
        // SAFETY: live context; an out-of-range db is refused with ERR.
        Some(f) => (unsafe { f(ctx.ctx, db) }) == raw::REDISMODULE_OK as c_int,
        None => db == 0,
    }
}

/// What the context's flags say, as far as EchoMQ asks.
#[derive(Clone, Copy)]
pub struct Flags(u32);

impl Flags {
    pub fn of(ctx: &Context) -> Flags {
        Flags(ctx.get_flags().bits() as u32)
    }

    /// Whether any of `flags` (`REDISMODULE_CTX_FLAGS_*`) is set.
    pub fn has_any(self, flags: u32) -> bool {
        self.has(flags)
    }

    fn has(self, flag: u32) -> bool {
        self.0 & flag != 0
    }

    pub fn primary(self) -> bool {
        self.has(raw::REDISMODULE_CTX_FLAGS_MASTER)
    }

    pub fn loading(self) -> bool {
        self.has(raw::REDISMODULE_CTX_FLAGS_LOADING)
    }

    pub fn cluster(self) -> bool {
        self.has(raw::REDISMODULE_CTX_FLAGS_CLUSTER)
    }

    pub fn aof(self) -> bool {
        self.has(raw::REDISMODULE_CTX_FLAGS_AOF)
    }

    pub fn oom(self) -> bool {
        self.has(raw::REDISMODULE_CTX_FLAGS_OOM)
    }

    /// Inside `MULTI`, a script, a context that denies blocking, or the primary's replication
    /// stream: a command there must not block.
    pub fn cannot_block(self) -> bool {
        self.has(
            raw::REDISMODULE_CTX_FLAGS_MULTI
                | raw::REDISMODULE_CTX_FLAGS_LUA
                | raw::REDISMODULE_CTX_FLAGS_DENY_BLOCKING
                | raw::REDISMODULE_CTX_FLAGS_REPLICATED,
        )
    }
}

/// Whether client writes are paused (`CLIENT PAUSE ... WRITE`, or a failover waiting for its
/// replica). Outside a client's own command nothing may be propagated then: the server stops
/// on its own assertion, where it would postpone a native command.
pub fn writes_paused() -> bool {
    // A plain flag read, which needs no context.
    Context::dummy().avoid_replication_traffic()
}

/// A connected client's id, database, and whether it is queuing a transaction.
pub struct ClientInfo {
    pub id: u64,
    pub db: i32,
    pub queuing: bool,
}

/// What the server says of client `id`, if it is connected.
pub fn client_info(id: u64) -> Option<ClientInfo> {
    // The server reads no context for this.
    let info = Context::dummy().get_client_info_by_id(id).ok()?;
    Some(ClientInfo {
        id,
        db: i32::from(info.db),
        queuing: info.flags & u64::from(raw::REDISMODULE_CLIENTINFO_FLAG_MULTI) != 0,
    })
}
