//! The host: the only code that talks to the server through raw pointers, and the only layer
//! with `unsafe` in it. Everything above sees safe types: strings ([`string`]), keys
//! ([`key`]), the [`store::ServerStore`] that implements the protocol's `Store`, ACL checks
//! ([`acl`]), keyspace events and replication by effect ([`propagate`]), blocking
//! ([`block`]), the client and its context ([`client`]), what the server says of itself
//! ([`server`]), a step of `SCAN` ([`scan`]), events, the timer and the command filter ([`events`]), registration
//! ([`register`], [`load`]), what the store may skip of a queue's `meta` hash ([`meta_cache`]), the queues' metrics ([`metrics`]), and the
//! one panic guard ([`guard`]).
//!
//! The `valkey-module` crate's safe API is used where it serves every server EchoMQ supports
//! (Valkey 8.0-9.1, Redis 7.0; the crate is built with `use-redismodule-api` and its default
//! feature, `min-redis-compatibility-version-7-0`): `Context` itself, `Context::call`, the timer
//! (`create_timer`/`stop_timer`), the command filter (`register_command_filter`,
//! `CommandFilterCtx`), the `INFO` builder (`InfoContext`, registered through
//! `raw::register_info_function`), server events (`raw::subscribe_to_server_event`), the
//! client and context (`get_client_id`, `get_flags`, `avoid_replication_traffic`,
//! `get_client_info_by_id`), `server_info` and `get_server_version`, `replicate_verbatim`,
//! `set_module_options`, and the allocator (`alloc::ValkeyAlloc`). Every other call to
//! the server is a raw one, listed here with where it is made and what the crate offers instead
//! (file:line in the crate's `src/`):
//!
//! | raw API | where | the crate's counterpart, and why EchoMQ calls the raw API |
//! |---|---|---|
//! | `OpenKey`, `CloseKey`, `KeyType`, `ValueLength`, `DeleteKey`, `SetAbsExpire`, `SignalModifiedKey` | `key` (`SignalModifiedKey` also `load`, checked there) | the crate's `ValkeyKey`/`ValkeyKeyWritable` keep their key handle private (key.rs:54, 196), so a key opened through them cannot reach the `Zset*` calls below; they have no `ValueLength` and no `SetAbsExpire` (only the relative `set_expire`, key.rs:324), their `delete` ignores the status (key.rs:362), and the crate has no `SignalModifiedKey`, which EchoMQ needs under `NO_IMPLICIT_SIGNAL_MODIFIED` to signal only keys a write changed (the quiet open flags are there: `KeyFlags`, `open_key_with_flags`, key.rs:38, context/mod.rs:649) |
//! | `ZsetAdd`, `ZsetRem`, `ZsetScore`, `ZsetFirstInScoreRange`, `ZsetRangeCurrentElement`, `ZsetRangeNext`, `ZsetRangeStop` | `key` | the crate has no sorted-set API |
//! | `HashGet`, `HashSet` | `key` (fields named by server strings: the row's and `meta`'s made once at load, the tables' any bytes) | the crate's `hash_get`/`hash_set` exist only on its key types (above); `hash_set` sets one field a call, the field a `&str` it copies into a `CString` and `unwrap()`s (raw.rs:618), the value an owned `ValkeyString` (key.rs:251); three fields in one call keep the reference row's order in one step |
//! | `CreateString`, `CreateStringFromLongLong`, `FreeString`, `HoldString`, `StringPtrLen` | `string` | the crate's `ValkeyString` has no borrowed form: it retains an argument it wraps and frees it on drop (`ValkeyString::new`, redismodule.rs:129), a `RetainString` and a `FreeString` per argument; the crate has no `HoldString` (the name cache) or `CreateStringFromLongLong`, and its `string_as_slice` does not check for a null string (redismodule.rs:222) |
//! | `ACLCheckKeyPermissions`, `ACLCheckCommandPermissions`, `ACLAddLogEntry`, `GetModuleUserFromUserName`, `FreeModuleUser`, `GetCurrentUserName`, `GetClientUserNameById` | `acl` | the crate's `acl_check_key_permission` (context/mod.rs:809) takes the user name as a `ValkeyString`, looks the user up and frees it again for every key, and adds no `ACL LOG` entry; it has nothing for `ACLCheckCommandPermissions` or `ACLAddLogEntry`; its `get_current_user` (context/mod.rs:781) calls `GetCurrentUserName` and wraps what it returns unchecked, without first asking whether the client has a user (the primary's link has none); its `get_client_username_by_id` (context/client.rs:60) folds a NULL into one error, leaving the `ENOTSUP` of a client without a user only in errno |
//! | `Call` (with no arguments, to probe for a user), `FreeCallReply` | `acl` | `Context::call` always uses the format `v` (`raw::FMT`, raw.rs:237), so it cannot ask for `C`; `call_ext` can (`verify_acl()` gives `vC`) but turns a NULL reply into `Ok(CallReply::Unknown)` (context/call_reply.rs:840), leaving `ENOTSUP` only in errno |
//! | `GetSelectedDb`, `SelectDb` | `client` | the crate has neither (its `get_client_id`, `get_flags`, `avoid_replication_traffic` and `get_client_info_by_id` serve, and `client` calls them) |
//! | `NotifyKeyspaceEvent`, `SignalKeyAsReady`, `Replicate` | `propagate` | the crate's `notify_keyspace_event` (context/mod.rs:701) takes the key as a `&ValkeyString` and copies the event name into a `CString` each call (raw.rs:935); it has no `SignalKeyAsReady`; its `replicate` (raw.rs:753) copies the command name into a `CString` and collects the arguments into a `Vec`, each byte slice copied into a new server string (`StrCallArgs`, context/mod.rs:296), always as format `v`, where EchoMQ passes the server strings it holds as `s` arguments (up to seven); its `replicate_verbatim` serves, and `propagate` calls it |
//! | `BlockClientOnKeys` | `block` | the crate has no block-on-keys wrapper (only `block_client`, and `block_client_on_auth` with `min-redis-compatibility-version-7-2`) |
//! | `ReplyWithArray`, `ReplyWithError`, `ReplyWithLongLong`, `ReplyWithMap`, `ReplyWithNull`, `ReplyWithStringBuffer` | `reply` | the crate's `Context::reply` (context/mod.rs:532) renders a `ValkeyValue`, whose maps are a `HashMap` or a key-sorted `BTreeMap` (redisvalue.rs:33, 35), so a reply's field order could not be kept, and EchoMQ's `Reply` would be rebuilt as a `ValkeyValue` first (the crate also falls back from `ReplyWithMap` to a flat array, raw.rs:410) |
//! | `Milliseconds`, `Log`, `GetDetachedThreadSafeContext`, `FreeThreadSafeContext` | `server` | the crate's `log` (logging.rs:31) passes the message as the format string (a `%` in a queue name would be read as one) and `unwrap()`s `CString::new` of it (a NUL byte panics); its `DetachedContext` (context/mod.rs:155) makes the context in `set_context` but never frees it, and gives a `Context` only through `lock()`, documented not to return on a thread that already holds the lock, as the main thread does (context/mod.rs:235); it has no `Milliseconds` (its `server_info`, `field_c`, `field_signed` and `get_server_version` serve, and `server` calls them) |
//! | `SubscribeToKeyspaceEvents`, `CommandFilterGetClientId`, `Scan`, `ScanCursorCreate`, `ScanCursorDestroy`, `RegisterInfoFunc` and `RegisterCommandFilter` (these two only checked, then the crate's `raw::register_info_function` and `register_command_filter`, which `unwrap()` them) | `events` | the crate subscribes keyspace events only in its `redis_event_handler!` macro (macros.rs:54), which `return`s from the calling function on failure and `unwrap()`s the event name as UTF-8; `CommandFilterCtx::get_client_id` exists only with `min-redis-compatibility-version-7-2` (filter.rs:106), as Redis 7.0 lacks the function; `KeysCursor::scan` (keys_cursor.rs:38) scans the context's selected database only, takes the callback as `&F` yet calls it through a `&mut` (keys_cursor.rs:25, 48), and retains each key name into a `ValkeyString`; server events go through the crate's plain `raw::subscribe_to_server_event` (its `register_server_events` drops the databases of FLUSHDB and SWAPDB and has no slot-migration event) |
//! | `CreateCommand`, `GetCommand`, `SetCommandInfo`, `SetCommandACLCategories`, `AddACLCategory` | `register` | the crate creates commands in its `redis_command!` macro (macros.rs:2), with no command info, or in `commands::register_commands` for `#[command]` functions, whose info has no `args` and no history (context/commands.rs:433, 437); its `add_acl_category` and `set_acl_category` (context/mod.rs:496, 502) exist only with `min-valkey-compatibility-version-8-0` and `min-redis-compatibility-version-7-2` respectively, and `unwrap()` `AddACLCategory` and `SetCommandACLCategories`, which Redis 7.0 lacks |
//! | `Export_RedisModule_Init`, `RegisterNumericConfig`, `LoadConfigs` | `load` | the crate's entry point is its `valkey_module!` macro (macros.rs:118), which runs `init` with no panic guard (macros.rs:473) and registers its own `INFO` callback (macros.rs:462), and calls `LoadConfigs` only there, ignoring the status (macros.rs:447); its `register_i64_configuration` (configuration.rs:244) drops the status and `Box::into_raw`s data it never frees; its `set_module_options` serves and `load` calls it (`ModuleOptions::from_bits_retain` carries Valkey 9.0's atomic-migration bit, which the crate names only with `min-valkey-compatibility-version-9-0`) |
//! | `ScanKey`, `ScanCursorCreate`, `ScanCursorDestroy` | `key` (`Key::hash_fields`: a queue's `meta` hash read in one walk) | the crate has no `RM_ScanKey` wrapper; a queue's `unique` and `cron` tables are scanned with `Context::call_ext("HSCAN")` instead, whose cursor is a number that outlives the call |
//! | `GetAbsExpire` | `key`, `events` | the crate reads a key's time to live only relative to now, through its own key types, and not for the key a scan hands over |

pub mod acl;
pub mod block;
pub mod client;
pub mod events;
pub mod guard;
pub mod key;
pub mod load;
pub mod meta_cache;
pub mod metrics;
pub mod propagate;
pub mod ranked;
pub mod register;
pub mod reply;
pub mod scan;
pub mod server;
pub mod store;
pub mod string;
pub mod words;
