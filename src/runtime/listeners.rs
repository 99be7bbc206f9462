//! Whether anything but EchoMQ takes keyspace events, for `host::propagate::notify`: while
//! nothing does, an EchoMQ write's event reaches EchoMQ's own handler directly, without the
//! server's dispatch (a context and a temporary client made and freed for each event).
//!
//! Two things may take one: another module (any loaded module may subscribe to keyspace
//! events, but for the Lua engine Valkey 9 loads as a module), and clients, through the
//! channels `notify-keyspace-events` turns on. The modules are listed at load and again at
//! each module's load or unload; the setting is read at load and at every change of it. Until
//! both are known, something may listen.

use std::ffi::CStr;
use std::sync::atomic::{AtomicBool, Ordering};

use valkey_module::Context;

use crate::host::propagate::set_others_listen;
use crate::host::server::{keyspace_channels, other_modules_loaded};

/// Whether a module besides EchoMQ may take keyspace events (or it is not known).
static OTHER_MODULES: AtomicBool = AtomicBool::new(true);
/// Whether `notify-keyspace-events` publishes to clients.
static CHANNELS: AtomicBool = AtomicBool::new(true);

/// Reads both at load.
pub fn start(ctx: &Context) {
    OTHER_MODULES.store(other_modules_loaded(ctx, None), Ordering::Relaxed);
    CHANNELS.store(keyspace_channels(ctx), Ordering::Relaxed);
    publish();
}

/// Something may listen again (module unload).
pub fn stop() {
    OTHER_MODULES.store(true, Ordering::Relaxed);
    publish();
}

/// A config change: reads the setting again when it changed.
pub fn on_config_change(ctx: &Context, names: &[&CStr]) {
    if names
        .iter()
        .any(|n| n.to_bytes().eq_ignore_ascii_case(b"notify-keyspace-events"))
    {
        CHANNELS.store(keyspace_channels(ctx), Ordering::Relaxed);
        publish();
    }
}

/// Another module was loaded or is being unloaded (`name`, still listed): counts again.
pub fn on_module_change(ctx: &Context, loaded: bool, name: &str) {
    let leaving = (!loaded).then_some(name);
    OTHER_MODULES.store(other_modules_loaded(ctx, leaving), Ordering::Relaxed);
    publish();
}

fn publish() {
    set_others_listen(OTHER_MODULES.load(Ordering::Relaxed) || CHANNELS.load(Ordering::Relaxed));
}
