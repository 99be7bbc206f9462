//! The server harness: every test starts real `valkey-server` processes with the module, on
//! free loopback ports, in temp dirs, and kills them on drop.
//!
//! Environment:
//! - `VALKEY_SERVER`: the server binary (default `valkey-server`).
//! - `ECHOMQ_MODULE`: the module to load (default `target/release/libechomq.so`).
//! - `ECHOMQ_EXTERNAL`: `host:port` of an already-running server with the module; tests that
//!   only need one plain server (`Server::start_or_external`) use it instead of spawning their
//!   own.
mod facts;
pub mod flow;
mod queue;
mod rng;

pub use facts::*;
pub use queue::*;
pub use rng::*;

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

/// A preload shim of `scripts/` (`aof-power-loss-shim`, `clock-shift-shim`) built with `cc`
/// into `target/shims`, once per test process; its path, for `LD_PRELOAD`.
pub fn preload_shim(name: &str) -> PathBuf {
    static BUILT: std::sync::Mutex<Vec<(String, PathBuf)>> = std::sync::Mutex::new(Vec::new());
    let mut built = BUILT.lock().unwrap_or_else(|p| p.into_inner());
    if let Some((_, path)) = built.iter().find(|(n, _)| n == name) {
        return path.clone();
    }
    let dir = repo_root().join("target/shims");
    std::fs::create_dir_all(&dir).expect("target/shims");
    let out = dir.join(format!("{name}.so"));
    let building = dir.join(format!("{name}.so.{}", std::process::id()));
    let status = Command::new("cc")
        .args(["-shared", "-fPIC", "-O2", "-Wall", "-o"])
        .arg(&building)
        .arg(repo_root().join(format!("scripts/{name}.c")))
        .args(["-ldl", "-lpthread"])
        .status()
        .expect("run cc (scripts/install-deps.sh installs gcc)");
    assert!(status.success(), "cc failed to build scripts/{name}.c");
    std::fs::rename(&building, &out).expect("move the shim into place");
    built.push((name.to_string(), out.clone()));
    out
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

    /// The module learning every foreign write as it happens (`emq.learn-foreign-writes yes`):
    /// for tests of what only that setting gives (a `COPY`, `RENAME`, `DEL` or hash written by
    /// hand seen at once, a replica watching what its stream wrote).
    pub fn learning() -> Self {
        Self::default().arg("emq.learn-foreign-writes", "yes")
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

/// The lines of a server's log a failing test prints.
const LOG_TAIL: usize = 30;

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
        let exited = self
            .child
            .as_mut()
            .and_then(|c| c.try_wait().ok().flatten());
        self.kill();
        // A failing test keeps its servers' logs, says where they are, and shows each one's end.
        if std::thread::panicking() {
            if let Some(dir) = self.dir.take() {
                let log = dir.keep().join("server.log");
                let how = exited.map_or("ran".to_string(), |s| format!("had exited ({s})"));
                let text = std::fs::read_to_string(&log).unwrap_or_default();
                let lines: Vec<&str> = text.lines().collect();
                let tail = lines[lines.len().saturating_sub(LOG_TAIL)..].join("\n  ");
                eprintln!(
                    "the server on port {} {how}; its log, {}, ends:\n  {tail}",
                    self.port,
                    log.display()
                );
            }
        }
    }
}
