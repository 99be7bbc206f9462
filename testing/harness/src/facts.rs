//! What a server says of itself, as the suites read it: `INFO`, `CONFIG`, its modules, its
//! blocked clients, its AOF, its digest and its replication link; and waiting for any of it.

use std::time::{Duration, Instant};

use redis::Value;

use crate::*;

/// The server's error text for a failed call: `CODE detail`.
pub fn error_text(err: &redis::RedisError) -> String {
    match (err.code(), err.detail()) {
        (Some(code), Some(detail)) => format!("{code} {detail}"),
        (Some(code), None) => code.to_string(),
        _ => err.to_string(),
    }
}

/// Runs a command and returns the error text; panics if it succeeded.
pub fn expect_err(con: &mut Connection, cmd: &redis::Cmd) -> String {
    match cmd.query::<Value>(con) {
        Ok(v) => panic!("expected an error, got {v:?}"),
        Err(e) => error_text(&e),
    }
}

/// The wall clock in unix ms, as the server's due times and lease deadlines count it.
pub fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

/// Modules a server lists of its own accord: Valkey 9 lists its Lua scripting engine as the
/// module `lua`, which nobody loads and nobody can unload.
const SERVER_MODULES: [&str; 1] = ["lua"];

/// The modules loaded into the server (`MODULE LIST`), each as its fields (`name`, `ver`,
/// `path`, `args`), without the server's own.
pub fn loaded_modules(con: &mut Connection) -> Vec<Vec<(String, Value)>> {
    let list: Vec<Vec<Value>> = redis::cmd("MODULE")
        .arg("LIST")
        .query(con)
        .expect("MODULE LIST");
    list.iter()
        .map(|entry| {
            entry
                .chunks(2)
                .map(|pair| (text(&pair[0]), pair[1].clone()))
                .collect::<Vec<_>>()
        })
        .filter(|fields| {
            !fields
                .iter()
                .any(|(k, v)| k == "name" && SERVER_MODULES.contains(&text(v).as_str()))
        })
        .collect()
}

/// The names of the modules loaded into the server, without the server's own.
pub fn module_names(con: &mut Connection) -> Vec<String> {
    loaded_modules(con)
        .iter()
        .filter_map(|fields| {
            fields
                .iter()
                .find(|(k, _)| k == "name")
                .map(|(_, v)| text(v))
        })
        .collect()
}

/// A reply that is a string (bulk or simple), as text; panics on anything else.
pub fn text(v: &Value) -> String {
    match v {
        Value::BulkString(b) => String::from_utf8_lossy(b).into_owned(),
        Value::SimpleString(s) => s.clone(),
        other => panic!("a string: {other:?}"),
    }
}

/// Whether client `id` waits in a blocking command (`CLIENT LIST ID`, flag `b`).
pub fn is_blocked(con: &mut Connection, id: i64) -> bool {
    let line: String = redis::cmd("CLIENT")
        .arg("LIST")
        .arg("ID")
        .arg(id)
        .query(con)
        .expect("client list");
    line.split(' ').any(|f| {
        f.strip_prefix("flags=")
            .is_some_and(|flags| flags.contains('b'))
    })
}

/// A RESP3 map reply as (field name, value) pairs, in the server's order.
pub fn map_pairs(v: &Value) -> Vec<(String, Value)> {
    let Value::Map(pairs) = v else {
        panic!("a map under RESP3, got {v:?}")
    };
    pairs.iter().map(|(k, v)| (text(k), v.clone())).collect()
}

/// Waits until `f` holds, polling, up to `timeout`.
pub fn wait_until(timeout: Duration, mut f: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + timeout;
    while Instant::now() < deadline {
        if f() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    f()
}

/// `CONFIG SET <name> <value>`; panics if the server refuses it.
pub fn config_set(con: &mut Connection, name: &str, value: &str) {
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg(name)
        .arg(value)
        .query(con)
        .unwrap_or_else(|e| panic!("CONFIG SET {name} {value}: {e}"));
}

/// One field of `INFO <section>`.
pub fn info_field(con: &mut Connection, section: &str, field: &str) -> Option<String> {
    let info: String = redis::cmd("INFO").arg(section).query(con).ok()?;
    field_of(&info, field).map(str::to_string)
}

/// One field's value in an `INFO` answer.
fn field_of<'a>(info: &'a str, field: &str) -> Option<&'a str> {
    info.lines()
        .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))
        .map(str::trim)
}

/// One numeric field of `INFO <section>`; panics if it is missing or not a number.
pub fn info_int(con: &mut Connection, section: &str, field: &str) -> i64 {
    let info: String = redis::cmd("INFO")
        .arg(section)
        .query(con)
        .unwrap_or_else(|e| panic!("INFO {section}: {e}"));
    field_of(&info, field)
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("INFO {section} has no number {field}"))
}

/// Whether something listens on `port` on loopback (used to wait for a port to be free).
pub fn port_open(port: u16) -> bool {
    TcpStream::connect(("127.0.0.1", port)).is_ok()
}

/// The words of a server's incremental AOF, in order (RESP framing dropped).
pub fn aof_words(server: &Server) -> Vec<String> {
    let dir = server
        .dir
        .as_ref()
        .expect("a server of our own")
        .path()
        .join("appendonlydir");
    let incr = std::fs::read_dir(&dir)
        .expect("an AOF directory")
        .filter_map(Result::ok)
        .find(|e| e.file_name().to_string_lossy().contains(".incr.aof"))
        .expect("an incremental AOF file");
    let text =
        String::from_utf8_lossy(&std::fs::read(incr.path()).expect("read the AOF")).into_owned();
    text.split("\r\n")
        .filter(|l| !l.starts_with('*') && !l.starts_with('$') && !l.is_empty())
        .map(str::to_string)
        .collect()
}

/// `DEBUG DIGEST` of the whole dataset (the server needs `enable-debug-command`).
pub fn digest(con: &mut Connection) -> String {
    redis::cmd("DEBUG")
        .arg("DIGEST")
        .query(con)
        .expect("DEBUG DIGEST")
}

/// Waits until a replica's link to its primary is up.
pub fn wait_link_up(replica: &mut Connection) {
    assert!(
        wait_until(Duration::from_secs(20), || {
            info_field(replica, "replication", "master_link_status").as_deref() == Some("up")
        }),
        "replica linked"
    );
}

/// Waits until a replica has processed everything its primary has propagated so far.
pub fn wait_caught_up(primary: &mut Connection, replica: &mut Connection) {
    let target = info_int(primary, "replication", "master_repl_offset");
    assert!(
        wait_until(Duration::from_secs(20), || {
            info_field(replica, "replication", "slave_repl_offset")
                .and_then(|v| v.parse::<i64>().ok())
                .is_some_and(|o| o >= target)
        }),
        "replica caught up to {target}"
    );
}

/// `emq_watched_queues` of `INFO emq`: the queues the timer watches.
pub fn watched_queues(con: &mut Connection) -> i64 {
    info_int(con, "emq", "emq_watched_queues")
}

/// How many clients wait in a blocking command, on the whole server.
pub fn blocked_clients(con: &mut Connection) -> i64 {
    info_int(con, "clients", "blocked_clients")
}

/// Waits (up to 5 s) until `n` clients wait in a blocking command.
pub fn until_blocked(con: &mut Connection, n: i64) -> bool {
    wait_until(Duration::from_secs(5), || blocked_clients(con) == n)
}

/// `SELECT db` on this connection.
pub fn in_db(con: &mut Connection, db: i64) {
    let _: () = redis::cmd("SELECT").arg(db).query(con).expect("SELECT");
}
