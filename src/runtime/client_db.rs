//! Keeps a client in its own database across `MOVE` and `COPY ... DB`.
//!
//! Valkey 8.1 runs a module's keyspace callbacks on the client whose command fired the event,
//! after selecting the event's database on that client, and until valkey-io/valkey#4024 did
//! not select the client's own database back. EchoMQ subscribes to generic events (to learn
//! queues whoever writes them), so on such a server `MOVE k 1` or `COPY a b DB 1`, on any key,
//! left the client in database 1, where its next commands went. EchoMQ selects the client's
//! database again in the command's last event:
//!
//! - `move_to` returns to the database of the `move_from` just before it (the source);
//! - `copy_to` returns to the database the client had when the command filter saw its `COPY`,
//!   or the `EXEC` of the transaction it was queued in (the filter sees a queued command when it
//!   is queued). A transaction that also queued a `SELECT` is left as the server leaves it.
//!
//! Servers before Valkey 8.1 give callbacks a client of their own: there this does nothing.
//! Where the server restores the database itself, it restores the same one.

use std::collections::BTreeSet;
use std::os::raw::c_int;
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU64, Ordering};
use std::sync::Mutex;

use valkey_module::Context;

use crate::host::client::{client_id, select_db, selected_db};
use crate::host::events::{EventName, FilterArgs};
use crate::host::propagate::NOTIFY_GENERIC;
use crate::host::server::version;

/// Whether the server runs keyspace callbacks on the executing client: Valkey 8.1 and later
/// (elsewhere nothing here runs, and costs nothing).
static ACTIVE: AtomicBool = AtomicBool::new(false);
const FIRST_AFFECTED_VERSION: c_int = 0x0008_0100;

/// The client (0: none) and database of the last `move_from`.
static MOVE_FROM: (AtomicU64, AtomicI32) = (AtomicU64::new(0), AtomicI32::new(0));
/// The client (0: none) and database of the last `COPY`, or `EXEC`, the filter saw.
static COPY_FROM: (AtomicU64, AtomicI32) = (AtomicU64::new(0), AtomicI32::new(0));
/// The clients that queued a `SELECT` in a transaction not yet run (at most [`TRACKED`]; a
/// client that left in the middle of one stays until the oldest go).
static SELECT_QUEUED: Mutex<BTreeSet<u64>> = Mutex::new(BTreeSet::new());
const TRACKED: usize = 1024;

/// Learns at load whether this server needs the correction.
pub fn init() {
    ACTIVE.store(version() >= FIRST_AFFECTED_VERSION, Ordering::Relaxed);
}

/// The command filter's part: the database of a client about to run a `COPY`, now or in the
/// transaction it is about to run.
pub fn observe_command(args: &FilterArgs, first: &[u8]) {
    if !ACTIVE.load(Ordering::Relaxed) {
        return;
    }
    let is = |name: &[u8]| first.eq_ignore_ascii_case(name);
    // Most commands are none of the four: let their length and first letter say so.
    let candidate = first.first().is_some_and(|c| {
        matches!(
            (first.len(), c.to_ascii_uppercase()),
            (4, b'C' | b'E') | (6, b'S') | (7, b'D')
        )
    });
    if !candidate || !(is(b"COPY") || is(b"EXEC") || is(b"SELECT") || is(b"DISCARD")) {
        return;
    }
    let Some(client) = args.client() else {
        remember(&COPY_FROM, 0, 0);
        return;
    };
    let mut selected = SELECT_QUEUED.lock().unwrap_or_else(|p| p.into_inner());
    if is(b"COPY") {
        // A queued one runs where its `EXEC` finds the client.
        if !client.queuing {
            remember(&COPY_FROM, client.id, client.db);
        }
    } else if is(b"SELECT") {
        if client.queuing {
            if selected.len() >= TRACKED {
                selected.pop_first();
            }
            selected.insert(client.id);
        }
    } else if selected.remove(&client.id) {
        // `EXEC` or `DISCARD` after a queued `SELECT`: where a `COPY` runs is not known here.
        remember(&COPY_FROM, 0, 0);
    } else if is(b"EXEC") {
        remember(&COPY_FROM, client.id, client.db);
    }
}

/// A keyspace event's part, after EchoMQ's own handling of it: selects the client's database
/// again after the last event of a `MOVE` or `COPY`.
pub fn after_event(ctx: &Context, class: c_int, event: EventName) {
    // Most generic events (`del`, `expire`, ...) are told apart by the name's first byte.
    if !ACTIVE.load(Ordering::Relaxed)
        || class & NOTIFY_GENERIC == 0
        || !matches!(event.first_byte(), Some(b'm' | b'c'))
    {
        return;
    }
    let from = match event.bytes() {
        b"move_from" => {
            remember(&MOVE_FROM, client_id(ctx), selected_db(ctx));
            return;
        }
        b"move_to" => &MOVE_FROM,
        b"copy_to" => &COPY_FROM,
        _ => return,
    };
    let client = client_id(ctx);
    if client != 0 && from.0.load(Ordering::Relaxed) == client {
        select_db(ctx, from.1.load(Ordering::Relaxed));
    }
    // A `COPY` record holds for the rest of its transaction (which may copy again); the filter
    // replaces it before the client's next `COPY` or `EXEC`.
    if event.bytes() == b"move_to" {
        remember(from, 0, 0);
    }
}

fn remember(slot: &(AtomicU64, AtomicI32), client: u64, db: i32) {
    slot.0.store(client, Ordering::Relaxed);
    slot.1.store(db, Ordering::Relaxed);
}
