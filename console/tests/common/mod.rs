//! What the console's suites share: servers with the workspace's module, the `emq` binary, and
//! jobs put in each set by the server's own commands.
#![allow(dead_code)]

use std::process::{Command, Output};

use redis::Connection;

pub use emq_harness as support;

#[allow(unused_imports)] // each suite takes what it needs
pub use support::{cluster::Cluster, free_port, Options, Server};

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
    enqueue_with(con, queue, payload, &[])
}

/// An enqueue with `options` after the payload (`["GROUP", "a"]`); the job's id.
pub fn enqueue_with(
    con: &mut impl redis::ConnectionLike,
    queue: &str,
    payload: &str,
    options: &[&str],
) -> String {
    redis::cmd("EMQ.ENQUEUE")
        .arg(queue)
        .arg("*")
        .arg(payload)
        .arg(options)
        .query(con)
        .expect("enqueue")
}

/// The payloads of the jobs one claim of up to `count` takes, in the order it took them.
pub fn claim_payloads(
    con: &mut impl redis::ConnectionLike,
    queue: &str,
    count: usize,
) -> Vec<String> {
    let claimed: Vec<(String, String, i64)> = redis::cmd("EMQ.CLAIM")
        .arg(queue)
        .arg("COUNT")
        .arg(count)
        .query(con)
        .expect("claim");
    claimed.into_iter().map(|(_, payload, _)| payload).collect()
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

/// A child process killed on drop.
pub struct Running(pub std::process::Child);

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Waits (bounded) until something listens on `port`.
pub fn wait_port(port: u16) {
    let up = support::wait_until(std::time::Duration::from_secs(20), || {
        std::net::TcpStream::connect(("127.0.0.1", port)).is_ok()
    });
    assert!(up, "nothing listens on {port}");
}

/// `emq web --url <url> --bind 127.0.0.1:<port> args...`, serving once this returns.
pub fn web(url: &str, port: u16, args: &[&str]) -> Running {
    let child = Command::new(env!("CARGO_BIN_EXE_emq"))
        .args([
            "--url",
            url,
            "web",
            "--bind",
            &format!("127.0.0.1:{port}"),
            "--interval-ms",
            "200",
        ])
        .args(args)
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("run emq web");
    let running = Running(child);
    wait_port(port);
    running
}

/// `emq metrics --url <url> --listen 127.0.0.1:<port>`, serving once this returns.
pub fn metrics(url: &str, port: u16) -> Running {
    let child = Command::new(env!("CARGO_BIN_EXE_emq"))
        .args(["--url", url, "metrics", "--listen"])
        .arg(format!("127.0.0.1:{port}"))
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("run emq metrics");
    let running = Running(child);
    wait_port(port);
    running
}

/// One HTTP/1.1 request to the dashboard: the status code and the whole response.
pub fn http(port: u16, request: &str) -> (u16, String) {
    use std::io::{Read, Write};
    let mut stream = std::net::TcpStream::connect(("127.0.0.1", port)).expect("connect");
    stream.write_all(request.as_bytes()).expect("send");
    let mut response = String::new();
    stream.read_to_string(&mut response).expect("read");
    let code = response
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    (code, response)
}

/// A GET as a browser on the dashboard's own address sends it, with `headers` (each ending in
/// CRLF) added.
pub fn get(port: u16, path: &str, headers: &str) -> (u16, String) {
    http(
        port,
        &format!(
            "GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n{headers}Connection: close\r\n\r\n"
        ),
    )
}

/// A form's POST as a browser on one of the dashboard's pages sends it.
pub fn post(port: u16, path: &str, body: &str) -> (u16, String) {
    post_with(
        port,
        path,
        &format!("Host: 127.0.0.1:{port}\r\nOrigin: http://127.0.0.1:{port}\r\n"),
        body,
    )
}

/// A form's POST with the `headers` given (Host, Origin, Referer: each ending in CRLF).
pub fn post_with(port: u16, path: &str, headers: &str, body: &str) -> (u16, String) {
    http(
        port,
        &format!(
            "POST {path} HTTP/1.1\r\n{headers}Content-Type: application/x-www-form-urlencoded\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        ),
    )
}
