//! The server harness: every test starts real `valkey-server` processes with the module, on
//! free loopback ports, in temp dirs, and kills them on drop.
//!
//! Environment:
//! - `VALKEY_SERVER`: the server binary (default `valkey-server`).
//! - `ECHOMQ_MODULE`: the module to load (default `target/release/libechomq.so`).
//! - `ECHOMQ_EXTERNAL`: `host:port` of an already-running server with the module; tests that
//!   only need one plain server (`Server::start_or_external`) use it instead of spawning their
//!   own.

pub mod cluster;
pub mod cluster_load;

use std::io::{BufRead, BufReader};
use std::net::{TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub use redis::{Connection, Value};

const READY_TIMEOUT: Duration = Duration::from_secs(60);

pub fn server_binary() -> String {
    std::env::var("VALKEY_SERVER").unwrap_or_else(|_| "valkey-server".to_string())
}

pub fn module_path() -> PathBuf {
    match std::env::var("ECHOMQ_MODULE") {
        Ok(p) => PathBuf::from(p),
        Err(_) => repo_root().join("target/release/libechomq.so"),
    }
}

/// The repository's root (this crate lives in `testing/harness`).
pub fn repo_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The test-only module of `testing/caller-module` (`make test` builds it), which calls
/// commands through `RM_Call` the way other modules do; load it with
/// `Options::default().arg("loadmodule", &caller_module())`.
pub fn caller_module() -> String {
    let path = repo_root().join("target/release/libemq_test_caller.so");
    assert!(
        path.exists(),
        "{} is missing: cargo build --release -p emq-test-caller (make test does)",
        path.display()
    );
    path.display().to_string()
}

/// A primary (`Options::primary()`) and a replica of it started with `replica`, its link up.
pub fn primary_and_replica(replica: Options) -> (Server, Server) {
    let primary = Server::start(Options::primary());
    let replica = Server::replica_of(&primary, replica);
    wait_link_up(&mut replica.conn());
    (primary, replica)
}

/// Creates `user` (password `pw`) with the ACL `rules` and logs a new connection in as it.
pub fn user_with(server: &Server, user: &str, rules: &[&str]) -> Connection {
    let _: () = redis::cmd("ACL")
        .arg("SETUSER")
        .arg(user)
        .arg("on")
        .arg(">pw")
        .arg(rules)
        .query(&mut server.conn())
        .expect("ACL SETUSER");
    let mut con = server.conn();
    let _: () = redis::cmd("AUTH")
        .arg(user)
        .arg("pw")
        .query(&mut con)
        .expect("AUTH");
    con
}

/// `EMQ.ENQUEUE <q> <id> <payload>`: `1` enqueued, `0` a duplicate.
pub fn enqueue(con: &mut impl redis::ConnectionLike, q: &str, id: &str, payload: &str) -> i64 {
    redis::cmd("EMQ.ENQUEUE")
        .arg(q)
        .arg(id)
        .arg(payload)
        .query(con)
        .expect("enqueue")
}

/// Enqueues jobs 1 to `n` (as [`job_id`] names them) on `q`, each with `payload`.
pub fn enqueue_numbered(con: &mut impl redis::ConnectionLike, q: &str, n: u64, payload: &str) {
    for i in 1..=n {
        enqueue(con, q, &job_id(i), payload);
    }
}

/// `EMQ.ENQUEUE <q> <id> <payload> DELAY <ms>`: a job due `delay_ms` from now.
pub fn enqueue_delayed(
    con: &mut impl redis::ConnectionLike,
    q: &str,
    id: &str,
    payload: &str,
    delay_ms: u64,
) -> i64 {
    redis::cmd("EMQ.ENQUEUE")
        .arg(q)
        .arg(id)
        .arg(payload)
        .arg("DELAY")
        .arg(delay_ms)
        .query(con)
        .expect("delayed enqueue")
}

/// Every command the module registers (`COMMAND LIST FILTERBY MODULE emq`), lower-case.
pub fn emq_commands(con: &mut Connection) -> Vec<String> {
    redis::cmd("COMMAND")
        .arg("LIST")
        .arg("FILTERBY")
        .arg("MODULE")
        .arg("emq")
        .query(con)
        .expect("COMMAND LIST")
}

pub fn free_port() -> u16 {
    let l = TcpListener::bind("127.0.0.1:0").expect("bind an ephemeral port");
    l.local_addr().expect("local addr").port()
}

/// How to start one server.
#[derive(Clone, Debug)]
pub struct Options {
    /// Load the module with `--loadmodule`.
    pub module: bool,
    /// Extra `--name value` arguments.
    pub args: Vec<String>,
    /// A config file given as the first argument, relative to the repo root.
    pub config_file: Option<PathBuf>,
}

impl Default for Options {
    fn default() -> Self {
        Self {
            module: true,
            args: Vec::new(),
            config_file: None,
        }
    }
}

impl Options {
    pub fn without_module() -> Self {
        Self {
            module: false,
            ..Self::default()
        }
    }

    /// A primary for replication tests: the module, `DEBUG` allowed (for `DEBUG DIGEST`) and
    /// no delay before a diskless sync.
    pub fn primary() -> Self {
        Self::default()
            .arg("enable-debug-command", "local")
            .arg("repl-diskless-sync-delay", "0")
    }

    pub fn arg(mut self, name: &str, value: &str) -> Self {
        self.args.push(format!("--{name}"));
        self.args.push(value.to_string());
        self
    }
}

/// A running server, or the external one. Killed (if ours) and its dir removed on drop.
pub struct Server {
    pub port: u16,
    pub host: String,
    child: Option<Child>,
    pub dir: Option<tempfile::TempDir>,
    pub log: PathBuf,
    opts: Options,
    /// Variables set in the server's environment (kept for restarts).
    env: Vec<(String, String)>,
}

impl Server {
    /// The external server when `ECHOMQ_EXTERNAL` is set, else a fresh one of our own with the
    /// module: for tests that need nothing special of their server.
    pub fn start_or_external() -> Server {
        if let Ok(addr) = std::env::var("ECHOMQ_EXTERNAL") {
            let (host, port) = addr.rsplit_once(':').expect("ECHOMQ_EXTERNAL is host:port");
            return Server {
                port: port.parse().expect("numeric port"),
                host: host.to_string(),
                child: None,
                dir: None,
                log: PathBuf::new(),
                opts: Options::default(),
                env: Vec::new(),
            };
        }
        Server::start(Options::default())
    }

    /// A fresh server of our own, started with `opts`.
    pub fn start(opts: Options) -> Server {
        Self::start_with_env(opts, &[])
    }

    /// A fresh server of our own, started with `opts` and these variables in its environment
    /// (at every restart too).
    pub fn start_with_env(opts: Options, env: &[(&str, &str)]) -> Server {
        let env: Vec<(String, String)> = env
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        let mut last_err = String::new();
        for _ in 0..5 {
            match Self::try_start(&opts, &env) {
                Ok(s) => return s,
                Err(e) => last_err = e,
            }
        }
        panic!("could not start {}: {last_err}", server_binary());
    }

    fn try_start(opts: &Options, env: &[(String, String)]) -> Result<Server, String> {
        let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
        let port = free_port();
        let log = dir.path().join("server.log");
        let mut server = Server {
            port,
            host: "127.0.0.1".to_string(),
            child: None,
            dir: Some(dir),
            log,
            opts: opts.clone(),
            env: env.to_vec(),
        };
        server.spawn()?;
        Ok(server)
    }

    /// Starts (again) this server's process with its options, port and directory.
    fn spawn(&mut self) -> Result<(), String> {
        let opts = self.opts.clone();
        let port = self.port;
        let dir = self
            .dir
            .as_ref()
            .ok_or("an external server cannot be spawned")?;
        let log = self.log.clone();
        let mut cmd = Command::new(server_binary());
        cmd.current_dir(repo_root());
        if let Some(conf) = &opts.config_file {
            cmd.arg(repo_root().join(conf));
        }
        cmd.args(["--port", &port.to_string(), "--bind", "127.0.0.1"]);
        // A config file's relative loadmodule path resolves against the working directory,
        // which `--dir` would change before the module loads; such servers write no data.
        if opts.config_file.is_none() {
            cmd.args(["--dir", &dir.path().display().to_string()]);
        }
        cmd.args(["--logfile", &log.display().to_string()]).args([
            "--save",
            "",
            "--appendonly",
            "no",
            "--daemonize",
            "no",
        ]);
        if opts.module {
            cmd.arg("--loadmodule").arg(module_path());
        }
        cmd.args(&opts.args);
        cmd.envs(self.env.iter().map(|(k, v)| (k, v)));
        cmd.stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        self.child = Some(cmd.spawn().map_err(|e| format!("spawn: {e}"))?);
        self.wait_ready()
    }

    /// Kills the process at once (SIGKILL) and starts it again on the same port and data
    /// directory, as after a crash. `module` overrides whether the module is loaded.
    pub fn restart(&mut self, module: bool) {
        self.kill();
        self.opts.module = module;
        let deadline = Instant::now() + READY_TIMEOUT;
        loop {
            match self.spawn() {
                Ok(()) => return,
                Err(e) if Instant::now() > deadline => panic!("restart failed: {e}"),
                Err(_) => std::thread::sleep(Duration::from_millis(100)),
            }
        }
    }

    /// Replaces one `--name value` option for the next restart.
    pub fn set_option(&mut self, name: &str, value: &str) {
        let flag = format!("--{name}");
        if let Some(i) = self.opts.args.iter().position(|a| *a == flag) {
            self.opts.args[i + 1] = value.to_string();
        } else {
            self.opts.args.push(flag);
            self.opts.args.push(value.to_string());
        }
    }

    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    fn wait_ready(&mut self) -> Result<(), String> {
        let deadline = Instant::now() + READY_TIMEOUT;
        while Instant::now() < deadline {
            if let Some(child) = self.child.as_mut() {
                if let Ok(Some(status)) = child.try_wait() {
                    return Err(format!("exited early with {status}: {}", self.log_tail()));
                }
            }
            if let Ok(mut c) = self.try_conn() {
                let pong: redis::RedisResult<String> = redis::cmd("PING").query(&mut c);
                if pong.is_ok() {
                    return Ok(());
                }
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        Err(format!(
            "not ready in {READY_TIMEOUT:?}: {}",
            self.log_tail()
        ))
    }

    pub fn url(&self) -> String {
        format!("redis://{}:{}/", self.host, self.port)
    }

    fn try_conn(&self) -> redis::RedisResult<Connection> {
        let client = redis::Client::open(self.url())?;
        client.get_connection_with_timeout(Duration::from_secs(5))
    }

    pub fn conn(&self) -> Connection {
        self.try_conn().expect("connect to the test server")
    }

    /// A RESP3 connection (maps come back as maps).
    pub fn conn3(&self) -> Connection {
        let client = redis::Client::open(format!("{}?protocol=resp3", self.url())).expect("url");
        client.get_connection().expect("connect with RESP3")
    }

    pub fn is_alive(&self) -> bool {
        match self.try_conn() {
            Ok(mut c) => redis::cmd("PING").query::<String>(&mut c).is_ok(),
            Err(_) => false,
        }
    }

    pub fn is_external(&self) -> bool {
        self.child.is_none()
    }

    /// The whole server log.
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    pub fn log_tail(&self) -> String {
        let Ok(f) = std::fs::File::open(&self.log) else {
            return String::new();
        };
        let lines: Vec<String> = BufReader::new(f).lines().map_while(Result::ok).collect();
        lines[lines.len().saturating_sub(15)..].join("\n")
    }

    /// A replica of `primary`, started with `opts` and `DEBUG` allowed; its link may not be
    /// up yet (see [`wait_link_up`]).
    pub fn replica_of(primary: &Server, opts: Options) -> Server {
        Server::start(
            opts.arg("enable-debug-command", "local")
                .arg("replicaof", &format!("127.0.0.1 {}", primary.port)),
        )
    }

    /// Sends `sig` to the server's process (`-STOP` and `-CONT` pause and resume it), with the
    /// shell's own `kill`: a minimal system (a slim container) has no `kill` program.
    pub fn signal(&self, sig: &str) {
        let pid = self.pid().expect("a server of our own").to_string();
        let ok = Command::new("sh")
            .args(["-c", "kill \"$0\" \"$1\"", sig, &pid])
            .status()
            .expect("sh")
            .success();
        assert!(ok, "kill {sig}");
    }

    /// Kills the server at once (SIGKILL), as a crash would.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        // Under valgrind the server must exit normally to write its leak report.
        if std::env::var("ECHOMQ_GRACEFUL_STOP").is_ok_and(|v| v == "1") {
            if let Ok(mut c) = self.try_conn() {
                let _: redis::RedisResult<()> = redis::cmd("SHUTDOWN").arg("NOSAVE").query(&mut c);
            }
            if let Some(child) = self.child.as_mut() {
                let deadline = Instant::now() + Duration::from_secs(60);
                while Instant::now() < deadline {
                    if let Ok(Some(_)) = child.try_wait() {
                        self.child = None;
                        return;
                    }
                    std::thread::sleep(Duration::from_millis(50));
                }
            }
        }
        self.kill();
    }
}

/// A fresh queue name, so tests sharing a server never see each other's keys.
pub fn unique_queue(prefix: &str) -> String {
    use std::sync::atomic::{AtomicU64, Ordering};
    static N: AtomicU64 = AtomicU64::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    format!(
        "{prefix}-{}-{nanos}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    )
}

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

/// A deterministic xorshift generator for random test inputs.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Rng(seed.max(1))
    }

    /// A suite's generator: from `default`, or, with `ECHOMQ_SEED` set (decimal or `0x` hex),
    /// from that seed mixed with `default`, to explore other sequences than the suite's own.
    /// The seed is printed (shown when the test fails), so a failing run can be repeated.
    pub fn seeded(default: u64) -> Self {
        let given = std::env::var("ECHOMQ_SEED").ok();
        let parsed = given.as_deref().map(|s| match s.strip_prefix("0x") {
            Some(hex) => u64::from_str_radix(hex, 16),
            None => s.parse(),
        });
        let seed = match parsed {
            None => default,
            Some(Ok(s)) => s ^ default,
            Some(Err(_)) => panic!("ECHOMQ_SEED is not a number: {given:?}"),
        };
        eprintln!("random inputs from seed {seed:#x} (ECHOMQ_SEED {given:?})");
        Rng::new(seed)
    }

    pub fn next_u64(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.0 = x;
        x
    }

    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n.max(1)
    }

    /// One of `from`, at random.
    pub fn pick<'a, T>(&mut self, from: &'a [T]) -> &'a T {
        &from[self.below(from.len() as u64) as usize]
    }

    pub fn bytes(&mut self, max_len: usize, alphabet: &[u8]) -> Vec<u8> {
        let len = self.below(max_len as u64 + 1) as usize;
        (0..len)
            .map(|_| alphabet[self.below(alphabet.len() as u64) as usize])
            .collect()
    }
}

/// The node id a minted id carries (`emq.node-id` when it was minted).
pub fn node_of(id: &str) -> u16 {
    echomq::protocol::BrandedId::parse(id.as_bytes())
        .expect("a well-formed id")
        .node_id()
}

/// A valid `JOB` id for the number `n` (the same encoding the module uses).
pub fn job_id(n: u64) -> String {
    echomq::protocol::BrandedId::new(*b"JOB", n)
        .map(|id| String::from_utf8_lossy(&id.encode()).into_owned())
        .expect("a valid id")
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
    info.lines().find_map(|l| {
        l.strip_prefix(&format!("{field}:"))
            .map(|v| v.trim().to_string())
    })
}

/// One numeric field of `INFO <section>`; panics if it is missing or not a number.
pub fn info_int(con: &mut Connection, section: &str, field: &str) -> i64 {
    info_field(con, section, field)
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

/// `emq:{<queue>}:job:<id>`, spelled out as protocol.md §1 has it (the tests do not borrow the
/// module's own key builder).
pub fn row_key(queue: &str, id: &str) -> String {
    format!("emq:{{{queue}}}:job:{id}")
}

/// `emq:{<queue>}:<ty>` for a per-queue key (`pending`, `active`, `schedule`, ...).
pub fn set_key(queue: &str, ty: &str) -> String {
    format!("emq:{{{queue}}}:{ty}")
}

/// One field of a job's row (`state`, `attempts`, `payload`, `error`), as stored.
pub fn row_field(con: &mut Connection, queue: &str, id: &str, field: &str) -> Option<String> {
    redis::cmd("HGET")
        .arg(row_key(queue, id))
        .arg(field)
        .query(con)
        .expect("HGET")
}

/// A job's `state` field (`pending`, `active`, `scheduled`, `done`, `dead`); `None` without a row.
pub fn job_state(con: &mut Connection, queue: &str, id: &str) -> Option<String> {
    row_field(con, queue, id, "state")
}

/// A job's `attempts` field, as stored.
pub fn job_attempts(con: &mut Connection, queue: &str, id: &str) -> Option<String> {
    row_field(con, queue, id, "attempts")
}

/// The score of `id` in the queue's `ty` set: a due time, a lease deadline, an id's order.
pub fn set_score(con: &mut Connection, queue: &str, ty: &str, id: &str) -> Option<f64> {
    redis::cmd("ZSCORE")
        .arg(set_key(queue, ty))
        .arg(id)
        .query(con)
        .expect("ZSCORE")
}

/// One claimed job: (id, payload, attempts).
pub type Job = (String, Vec<u8>, i64);

/// `EMQ.CLAIM <queue> [opts...]`: the jobs claimed, `None` when a blocking claim timed out.
pub fn claim(con: &mut impl redis::ConnectionLike, queue: &str, opts: &[&str]) -> Option<Vec<Job>> {
    let mut c = redis::cmd("EMQ.CLAIM");
    c.arg(queue);
    for o in opts {
        c.arg(*o);
    }
    c.query(con).expect("claim")
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

/// `EMQ.STATS`: the queue's count per set, and its limits and their use (a limit not set is
/// left out).
pub fn stats(
    con: &mut impl redis::ConnectionLike,
    queue: &str,
) -> std::collections::HashMap<String, i64> {
    let counts: Vec<(String, Option<i64>)> = redis::cmd("EMQ.STATS")
        .arg(queue)
        .query(con)
        .expect("EMQ.STATS");
    counts
        .into_iter()
        .filter_map(|(k, v)| Some((k, v?)))
        .collect()
}

/// `SELECT db` on this connection.
pub fn in_db(con: &mut Connection, db: i64) {
    let _: () = redis::cmd("SELECT").arg(db).query(con).expect("SELECT");
}

/// How many members the queue's `ty` set (`pending`, `active`, ...) holds.
pub fn set_len(con: &mut Connection, queue: &str, ty: &str) -> i64 {
    redis::cmd("ZCARD")
        .arg(set_key(queue, ty))
        .query(con)
        .expect("ZCARD")
}

/// `EMQ.CLAIM <queue> BLOCK <block_ms>` sent on `worker` from a thread of its own; returns
/// once the server (asked on `admin`) counts one more blocked client. Joining the thread gives
/// the claim's reply, or its error text.
pub fn blocked_claim(
    admin: &mut Connection,
    mut worker: Connection,
    queue: &str,
    block_ms: u64,
) -> std::thread::JoinHandle<Result<Value, String>> {
    let before = blocked_clients(admin);
    let queue = queue.to_string();
    let claim = std::thread::spawn(move || {
        redis::cmd("EMQ.CLAIM")
            .arg(&queue)
            .arg("BLOCK")
            .arg(block_ms)
            .query::<Value>(&mut worker)
            .map_err(|e| error_text(&e))
    });
    let waiting = wait_until(Duration::from_secs(5), || {
        blocked_clients(admin) == before + 1
    });
    assert!(waiting, "the claim is blocked");
    claim
}

/// The members of the queue's `ty` set, lowest score first.
pub fn set_members(con: &mut Connection, queue: &str, ty: &str) -> Vec<String> {
    redis::cmd("ZRANGE")
        .arg(set_key(queue, ty))
        .arg(0)
        .arg(-1)
        .query(con)
        .expect("ZRANGE")
}

/// Work that keeps a primary's timer busy for about a second: jobs 1–20 ready (10 of them
/// claimed on 300 ms leases) and jobs 21–220 due one every 5 ms. Returns all 220 ids, in order:
/// once the second is over, every one of them is pending again.
pub fn jobs_coming_due(con: &mut Connection, queue: &str) -> Vec<String> {
    for i in 1..=20u64 {
        enqueue(con, queue, &job_id(i), "ready");
    }
    for i in 21..=220u64 {
        enqueue_delayed(con, queue, &job_id(i), "later", 5 * (i - 20));
    }
    let claimed: Vec<(String, Vec<u8>, i64)> = redis::cmd("EMQ.CLAIM")
        .arg(queue)
        .arg("COUNT")
        .arg(10)
        .arg("LEASE")
        .arg(300)
        .query(con)
        .expect("claim");
    assert_eq!(claimed.len(), 10);
    (1..=220u64).map(job_id).collect()
}

/// Every key of a queue, sorted.
pub fn keys_of(con: &mut Connection, queue: &str) -> Vec<String> {
    let mut keys: Vec<String> = redis::cmd("KEYS")
        .arg(format!("emq:{{{queue}}}:*"))
        .query(con)
        .expect("KEYS");
    keys.sort();
    keys
}

/// Puts `n` dead jobs in `queue` as a plain writer would (HSET + ZADD), died a millisecond
/// apart up to now.
pub fn dead_jobs(con: &mut Connection, queue: &str, n: u64) {
    let start = now_ms() - n as i64;
    let mut pipe = redis::pipe();
    for i in 1..=n {
        let id = job_id(i);
        pipe.cmd("HSET")
            .arg(row_key(queue, &id))
            .arg(&["state", "dead", "attempts", "25", "payload", "p"])
            .ignore();
        pipe.cmd("ZADD")
            .arg(set_key(queue, "dead"))
            .arg(start + i as i64)
            .arg(&id)
            .ignore();
        if i % 5_000 == 0 || i == n {
            let () = pipe.query(con).expect("dead jobs");
            pipe = redis::pipe();
        }
    }
}

/// Overwrites `key` with a string, as an operator's mistake would (commands on it then refuse
/// with `WRONGTYPE`).
pub fn make_string(con: &mut Connection, key: &str) {
    let _: () = redis::cmd("SET").arg(key).arg("x").query(con).expect("SET");
}

/// Waits (up to 5 s) until the queue's `ty` set holds more than `n` members.
pub fn until_more_than(con: &mut Connection, queue: &str, ty: &str, n: i64) -> bool {
    wait_until(Duration::from_secs(5), || set_len(con, queue, ty) > n)
}

/// Each of `cases` (the arguments after `base`, and the start of the refusal expected) is
/// refused so.
pub fn assert_refused(con: &mut Connection, base: &redis::Cmd, cases: &[(&[&str], &str)]) {
    for (args, want) in cases {
        let mut c = base.clone();
        c.arg(*args);
        let err = expect_err(con, &c);
        assert!(err.starts_with(want), "{args:?}: {err}");
    }
}
