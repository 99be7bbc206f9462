//! The host: the only code that talks to the server through raw pointers, and the only layer
//! with `unsafe` in it. Everything above sees safe types: strings ([`string`]), keys
//! ([`key`]), the [`store::ServerStore`] that implements the protocol's `Store`, ACL checks
//! ([`acl`]), keyspace events and replication by effect ([`propagate`]), blocking
//! ([`block`]), the client and its context ([`client`]), what the server says of itself
//! ([`server`]), events, the timer and the command filter ([`events`]), registration
//! ([`register`], [`load`]), and the one panic guard ([`guard`]).
//!
//! The `valkey-module` crate's safe API is used where it serves every server EchoMQ supports
//! (Valkey 8.0-9.1, Redis 7.0): `Context::call`, the timer (`create_timer`/`stop_timer`), the
//! command filter (`register_command_filter`, `CommandFilterCtx`), the `INFO` builder, and
//! `Context` itself. Every raw call below is one of these, each for the reason given:
//!
//! | raw API | where | why the crate's wrapper does not serve |
//! |---|---|---|
//! | `OpenKey`, `CloseKey`, `KeyType`, `ValueLength`, `DeleteKey`, `SetAbsExpire` | `key` | the crate's `ValkeyKeyWritable` has no quiet open flags (`NOSTATS`, `NONOTIFY`, `NOTOUCH`), no `SetAbsExpire`, and signals every key it opens for writing, where EchoMQ signals only keys a write changed |
//! | `ZsetAdd`, `ZsetRem`, `ZsetScore`, `ZsetFirstInScoreRange`, `ZsetRangeCurrentElement`, `ZsetRangeNext`, `ZsetRangeStop` | `key` | the crate has no sorted-set API |
//! | `HashGet`, `HashSet` | `key` | the crate's `hash_set` takes one field a call and `&str` values (a payload is bytes); three fields in one call keep the reference row's order in one step |
//! | `CreateString`, `CreateStringFromLongLong`, `FreeString`, `HoldString`, `StringPtrLen` | `string` | `ValkeyString` frees through a context it `unwrap()`s, and cannot be borrowed from an argument without a copy; the name cache needs strings made without a context |
//! | `ACLCheckKeyPermissions`, `ACLCheckCommandPermissions`, `ACLAddLogEntry`, `GetModuleUserFromUserName`, `FreeModuleUser`, `GetCurrentUserName`, `GetClientUserNameById` | `acl` | the crate's `acl_check_key_permission` adds no `ACL LOG` entry, takes a `ValkeyString` user name, and reads the current user without asking whether the client has one (the primary's link has none) |
//! | `Call` (with no arguments, to probe for a user) | `acl` | `Context::call` cannot pass the `C` flag alone or tell `ENOTSUP` from other failures |
//! | `GetClientId`, `GetSelectedDb`, `SelectDb`, `GetContextFlags`, `AvoidReplicaTraffic`, `GetClientInfoById` | `client` | the crate's versions `unwrap()` where Redis 7.0 lacks the function, or (`GetClientInfoById`) do not exist |
//! | `NotifyKeyspaceEvent`, `SignalKeyAsReady`, `Replicate`, `ReplicateVerbatim` | `propagate` | the crate's `replicate` builds a `Vec` of `ValkeyString`s from `&str`s for every call; EchoMQ passes the server strings it already holds, unpacked for up to seven arguments |
//! | `BlockClientOnKeys` | `block` | the crate has no block-on-keys wrapper |
//! | `ReplyWith*` | `reply` | one renderer for the whole reply tree, RESP3 maps falling back to flat arrays, with no `unwrap()` on a missing function |
//! | `GetServerInfo`, `FreeServerInfo`, `ServerInfoGetFieldC`, `ServerInfoGetFieldSigned`, `GetServerVersion`, `Milliseconds`, `Log`, `GetDetachedThreadSafeContext`, `FreeThreadSafeContext` | `server` | the crate's `ServerInfo` `unwrap()`s every `CString` it makes; its `log` passes the message as the format string (a `%` in a queue name would be read as one) and panics on a NUL byte |
//! | `SubscribeToKeyspaceEvents`, `SubscribeToServerEvent`, `CommandFilterGetClientId`, `Scan`, `ScanCursorCreate`, `ScanCursorDestroy`, `RegisterInfoFunc` (checked, then the crate's) | `events` | the crate subscribes events only through its `valkey_module!` macro; `get_client_id` is only for Redis 7.2 on; its `KeysCursor` scans without selecting each database |
//! | `GetAbsExpire` | `key`, `events` | the crate reads a key's time to live only relative to now, through its own key types, and not for the key a scan hands over |
//! | `CreateCommand`, `GetCommand`, `SetCommandInfo`, `SetCommandACLCategories`, `AddACLCategory` | `register` | the crate registers commands only through its macro, which `unwrap()`s API pointers Redis 7.0 lacks, and documents arguments less fully |
//! | `Init`, `SetModuleOptions`, `RegisterNumericConfig`, `LoadConfigs` | `load` | EchoMQ's own entry point (the macro's `unwrap()`s, above); the crate's config registration boxes data it never frees and ignores a refusal |

pub mod acl;
pub mod block;
pub mod client;
pub mod events;
pub mod guard;
pub mod key;
pub mod load;
pub mod propagate;
pub mod register;
pub mod reply;
pub mod server;
pub mod store;
pub mod string;
pub mod words;
