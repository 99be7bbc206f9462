//! What the console's suites share: servers with the workspace's module, the `emq` binary, and
//! jobs put in each set by the server's own commands.
#![allow(dead_code)]

use std::process::{Command, Output};

use redis::Connection;

#[path = "../../../tests/support/mod.rs"]
pub mod support;

#[allow(unused_imports)] // each suite takes what it needs
pub use support::{cluster::Cluster, Options, Server};

/// The module the servers load: the workspace's release build, unless ECHOMQ_MODULE says.
pub fn servers_load_the_module() {
    if std::env::var_os("ECHOMQ_MODULE").is_none() {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
        std::env::set_var("ECHOMQ_MODULE", root.join("target/release/libechomq.so"));
    }
}

/// A server whose jobs die at their first failure, so a test makes dead jobs in one step.
pub fn server() -> Server {
    servers_load_the_module();
    Server::start(Options::default().arg("emq.max-attempts", "1"))
}

/// `emq --url <url> args...`: its exit code, stdout and stderr.
pub fn emq(url: &str, args: &[&str]) -> (i32, String, String) {
    let Output {
        status,
        stdout,
        stderr,
    } = Command::new(env!("CARGO_BIN_EXE_emq"))
        .arg("--url")
        .arg(url)
        .args(args)
        .output()
        .expect("run emq");
    (
        status.code().unwrap_or(-1),
        String::from_utf8_lossy(&stdout).into_owned(),
        String::from_utf8_lossy(&stderr).into_owned(),
    )
}

pub fn enqueue(con: &mut impl redis::ConnectionLike, queue: &str, payload: &str) -> String {
    redis::cmd("EMQ.ENQUEUE")
        .arg(queue)
        .arg("*")
        .arg(payload)
        .query(con)
        .expect("enqueue")
}

/// Claims the queue's next job and fails it with `error`: dead, on a server from [`server`].
pub fn kill_next(con: &mut impl redis::ConnectionLike, queue: &str, error: &str) -> String {
    let claimed: Vec<(String, Vec<u8>, i64)> = redis::cmd("EMQ.CLAIM")
        .arg(queue)
        .query(con)
        .expect("claim");
    let (id, _, token) = claimed.into_iter().next().expect("a job to claim");
    let outcome: String = redis::cmd("EMQ.FAIL")
        .arg(queue)
        .arg(&id)
        .arg(token)
        .arg("ERROR")
        .arg(error)
        .query(con)
        .expect("fail");
    assert_eq!(outcome, "dead");
    id
}

pub fn stats(con: &mut Connection, queue: &str) -> std::collections::HashMap<String, redis::Value> {
    redis::cmd("EMQ.STATS")
        .arg(queue)
        .query(con)
        .expect("stats")
}

pub fn count(con: &mut Connection, queue: &str, field: &str) -> i64 {
    match stats(con, queue).get(field) {
        Some(redis::Value::Int(n)) => *n,
        other => panic!("{field}: {other:?}"),
    }
}
