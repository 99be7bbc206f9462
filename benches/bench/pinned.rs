//! A server on a CPU of its own and the bench's threads on the others, for a table that
//! compares two settings of one server: its rounds then meet fewer of the machine's swings
//! (client threads sharing the server's core). `taskset` (util-linux) does the pinning; where
//! it is missing or the machine has one CPU, nothing is pinned and the table says so.

use std::process::{Command, Stdio};

use crate::support::Server;

/// The pinning in force; dropped, every thread may run on every CPU again.
pub struct Pinned {
    server: u32,
    last: usize,
    all: String,
}

/// `cpus` for every thread of process `pid`; whether `taskset` did it.
fn set(pid: u32, cpus: &str) -> bool {
    Command::new("taskset")
        .args(["-a", "-p", "-c", cpus, &pid.to_string()])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// Pins `server` to the last CPU and this process to the others; `None` where it cannot.
pub fn apart(server: &Server) -> Option<Pinned> {
    let cpus = std::thread::available_parallelism().ok()?.get();
    let pid = server.pid()?;
    if cpus < 2 {
        return None;
    }
    let (last, all) = (cpus - 1, format!("0-{}", cpus - 1));
    let rest = format!("0-{}", last - 1);
    if !(set(pid, &last.to_string()) && set(std::process::id(), &rest)) {
        set(pid, &all);
        return None;
    }
    Some(Pinned {
        server: pid,
        last,
        all,
    })
}

impl Pinned {
    /// How the table names the pinning.
    pub fn describe(&self) -> String {
        format!(
            "the server pinned to CPU {} and the bench's client threads to the others (`taskset`)",
            self.last
        )
    }
}

impl Drop for Pinned {
    fn drop(&mut self) {
        set(self.server, &self.all);
        set(std::process::id(), &self.all);
    }
}
