//! docs/bench.md: its opening paragraph (the machine, the command, the commit), and writing
//! it with what follows its generated tables kept.

use std::fmt::Write as _;
use std::thread;

use crate::support::{self, Server};
use crate::workload::CONNECTIONS;

/// docs/bench.md's title and opening paragraph: how the figures were made, on what, from
/// which commit.
pub fn header(md: &mut String, server: &Server, rounds: usize, jobs: usize) {
    let version: String = {
        let mut c = server.conn();
        support::info_field(&mut c, "server", "valkey_version").unwrap_or_else(|| "?".into())
    };
    let _ = writeln!(md, "# EchoMQ benchmarks\n");
    let _ = writeln!(
        md,
        "Produced by `make bench` (`BENCH_ROUNDS={rounds} BENCH_JOBS={jobs} cargo bench --bench enqueue`) at commit {} on {} ({} cores), valkey-server {version}, the module built with `cargo build --release`. One server, no replica and no AOF (as the server itself, EchoMQ then propagates nothing; the last enqueue table adds a replica); {CONNECTIONS} client connections; the same valid 14-byte `JOB` ids and the same 48-byte payload for every variant; variants interleaved (A B C D E, A B C D E, ...) over {rounds} rounds of {jobs} jobs, with `FLUSHALL` and `CONFIG RESETSTAT` before each run. Clients send pre-encoded RESP (the time measured is the server's, not the client's command building). Two server figures per job: the `INFO commandstats` time of the variant's commands (the command bodies only: a native command's window leaves out its request's parsing, argument objects and dispatch, while the module's covers composing its keys from the queue name, the ACL check of those derived keys and the key-name strings), and the main thread's CPU time from `INFO cpu` (everything the server did: reading, parsing, dispatch, the commands, replies). Jobs/s is measured by the client. Figures are medians over the rounds with the min–max spread; a ratio is the median of the per-round ratios (the variants of a round run back to back, so each ratio pairs runs that met the same machine).\n",
        commit(),
        cpu_model(),
        thread::available_parallelism().map(|n| n.get()).unwrap_or(0),
    );
}

/// Writes `md` to docs/bench.md, followed by what follows [`KEPT`] there now.
pub fn write(md: &str) {
    let path = support::repo_root().join("docs/bench.md");
    let previous = std::fs::read_to_string(&path).unwrap_or_default();
    // Keep what follows the generated tables (the clients' table, the link to the log).
    let kept = previous
        .split_once(KEPT)
        .map(|(_, l)| l.to_string())
        .unwrap_or_default();
    let _ = std::fs::write(&path, format!("{md}{KEPT}{kept}"));
}

/// Where docs/bench.md's generated tables end; what follows is kept as it is.
const KEPT: &str = "<!-- kept by make bench -->";

/// The commit the figures come from (`git rev-parse --short HEAD`), with `+changes` when the
/// tree differs from it.
fn commit() -> String {
    let git = |args: &[&str]| {
        std::process::Command::new("git")
            .args(args)
            .current_dir(support::repo_root())
            .output()
            .ok()
            .filter(|o| o.status.success())
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
    };
    let head = git(&["rev-parse", "--short", "HEAD"]).unwrap_or_else(|| "unknown".into());
    match git(&["status", "--porcelain", "--untracked-files=no"]) {
        Some(changes) if !changes.is_empty() => format!("{head}+changes"),
        _ => head,
    }
}

/// The machine's CPU, as /proc/cpuinfo names it.
fn cpu_model() -> String {
    std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("model name"))
                .map(|l| l.split(':').nth(1).unwrap_or("").trim().to_string())
        })
        .unwrap_or_else(|| "unknown".into())
}
