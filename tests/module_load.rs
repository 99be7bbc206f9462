//! The three ways the module arrives: `loadmodule` in a config file (module.conf), runtime
//! MODULE LOAD / MODULE LOADEX ... CONFIG, and MODULE UNLOAD followed by a fresh load.

use emq_harness as support;

use std::time::Duration;

use redis::{cmd, Value};
use support::*;

fn threads(con: &mut Connection) -> usize {
    let pid = info_field(con, "server", "process_id").expect("pid");
    std::fs::read_dir(format!("/proc/{pid}/task"))
        .expect("the server's threads in /proc")
        .count()
}

/// `MODULE UNLOAD emq`, which must succeed and leave no module loaded.
fn unload(con: &mut Connection) {
    let _: () = cmd("MODULE")
        .arg("UNLOAD")
        .arg("emq")
        .query(con)
        .expect("MODULE UNLOAD");
    assert!(module_names(con).is_empty());
}

#[test]
fn module_list_shows_the_crate_version() {
    // major × 10000 + minor × 100 + patch, as Valkey's modules number themselves.
    let server = Server::start(Options::default());
    let mut con = server.conn();
    let modules = loaded_modules(&mut con);
    let [fields] = modules.as_slice() else {
        panic!("one module loaded: {modules:?}")
    };
    assert!(fields.contains(&("name".to_string(), Value::BulkString(b"emq".to_vec()))));
    let ver = fields
        .iter()
        .find(|(name, _)| name == "ver")
        .map(|(_, v)| v.clone());
    let part = |name: &str| name.parse::<i64>().expect("a version part");
    let expected = part(env!("CARGO_PKG_VERSION_MAJOR")) * 10_000
        + part(env!("CARGO_PKG_VERSION_MINOR")) * 100
        + part(env!("CARGO_PKG_VERSION_PATCH"));
    assert_eq!(ver, Some(Value::Int(expected)), "{fields:?}");
}

#[test]
fn module_conf_starts_a_working_server() {
    let server = Server::start(Options {
        module: false,
        config_file: Some("module.conf".into()),
        args: vec![],
    });
    let mut con = server.conn();
    assert_eq!(module_names(&mut con), vec!["emq".to_string()]);
    let cfg: Vec<String> = cmd("CONFIG")
        .arg("GET")
        .arg("emq.*")
        .query(&mut con)
        .expect("config get");
    assert!(
        cfg.windows(2)
            .any(|w| w == ["emq.max-payload-bytes", "1048576"]),
        "{cfg:?}"
    );
    assert!(cfg.windows(2).any(|w| w == ["emq.node-id", "0"]), "{cfg:?}");
    assert_eq!(enqueue(&mut con, "orders", &job_id(1), "hello"), 1);
}

#[test]
fn runtime_load_loadex_unload_and_load_again() {
    let server = Server::start(Options::without_module().arg("enable-module-command", "local"));
    let mut con = server.conn();
    let path = module_path().display().to_string();
    let threads_before = threads(&mut con);

    let err = expect_err(&mut con, &cmd("EMQ.VERSION"));
    assert!(err.starts_with("ERR unknown command"), "{err}");

    let _: () = cmd("MODULE")
        .arg("LOAD")
        .arg(&path)
        .query(&mut con)
        .expect("MODULE LOAD");
    assert_eq!(module_names(&mut con), vec!["emq".to_string()]);
    let v: String = cmd("EMQ.VERSION").query(&mut con).expect("version");
    assert_eq!(v, "echomq:2.0.0");
    assert_eq!(enqueue(&mut con, "orders", &job_id(1), "x"), 1);

    unload(&mut con);
    let err = expect_err(
        &mut con,
        cmd("EMQ.ENQUEUE").arg("orders").arg(job_id(2)).arg("x"),
    );
    assert!(
        err.starts_with("ERR unknown command"),
        "commands are gone: {err}"
    );
    assert_eq!(threads(&mut con), threads_before, "no thread left behind");
    assert!(server.is_alive());

    let _: () = cmd("MODULE")
        .arg("LOADEX")
        .arg(&path)
        .arg("CONFIG")
        .arg("emq.node-id")
        .arg("7")
        .query(&mut con)
        .expect("MODULE LOADEX");
    let node: Vec<String> = cmd("CONFIG")
        .arg("GET")
        .arg("emq.node-id")
        .query(&mut con)
        .expect("config");
    assert_eq!(node, vec!["emq.node-id".to_string(), "7".to_string()]);
    let id: String = cmd("EMQ.ENQUEUE")
        .arg("orders")
        .arg("*")
        .arg("x")
        .query(&mut con)
        .expect("mint");
    assert_eq!(node_of(&id), 7);
    // The `emq` ACL category outlives an unload (the server never removes one); loaded again,
    // the commands join it, and nothing is wrong enough to warn about.
    if info_field(&mut con, "server", "valkey_version").is_some() {
        let mut worker = user_with(&server, "reloaded", &["-@all", "+@emq", "~*"]);
        let v: String = cmd("EMQ.VERSION")
            .query(&mut worker)
            .expect("granted by @emq");
        assert_eq!(v, "echomq:2.0.0");
        assert!(!server.log().contains("ACL category"), "{}", server.log());
    }
    assert_eq!(
        enqueue(&mut con, "orders", &job_id(1), "x"),
        0,
        "data survived"
    );

    let err = expect_err(
        &mut con,
        cmd("MODULE")
            .arg("LOADEX")
            .arg(&path)
            .arg("CONFIG")
            .arg("emq.node-id")
            .arg("5000"),
    );
    assert!(err.starts_with("ERR"), "{err}");
    assert!(server.is_alive());
}

#[test]
fn load_arguments_are_refused_with_the_way_to_give_settings() {
    // A setting written as a load argument would otherwise be ignored (every primary minting
    // with node id 0): the load fails and the log says how to give it.
    let server = Server::start(Options::without_module().arg("enable-module-command", "local"));
    let mut con = server.conn();
    let path = module_path().display().to_string();
    let err = expect_err(
        &mut con,
        cmd("MODULE")
            .arg("LOAD")
            .arg(&path)
            .arg("emq.node-id")
            .arg("5"),
    );
    assert!(err.starts_with("ERR Error loading the extension"), "{err}");
    assert!(module_names(&mut con).is_empty());
    assert!(
        server
            .log()
            .contains("EchoMQ: refusing to load: it takes no load arguments (got: emq.node-id 5)"),
        "{}",
        server.log()
    );
    let _: () = cmd("MODULE")
        .arg("LOADEX")
        .arg(&path)
        .arg("CONFIG")
        .arg("emq.node-id")
        .arg("5")
        .query(&mut con)
        .expect("the way the log names");
    let node: Vec<String> = cmd("CONFIG")
        .arg("GET")
        .arg("emq.node-id")
        .query(&mut con)
        .expect("config");
    assert_eq!(node, ["emq.node-id", "5"]);
}

#[test]
fn module_load_is_refused_where_the_server_disables_it() {
    let server = Server::start(Options::without_module());
    let mut con = server.conn();
    let err = expect_err(
        &mut con,
        cmd("MODULE")
            .arg("LOAD")
            .arg(module_path().display().to_string()),
    );
    assert!(
        err.starts_with("ERR MODULE command not allowed") && err.contains("enable-module-command"),
        "{err}"
    );
    assert!(module_names(&mut con).is_empty());
}

#[test]
fn settings_survive_config_rewrite_and_a_restart() {
    let dir = tempfile::tempdir().expect("tempdir");
    let conf = dir.path().join("echomq.conf");
    std::fs::write(
        &conf,
        format!(
            "loadmodule {}\nemq.lease-ms 5000\n",
            module_path().display()
        ),
    )
    .expect("write the config file");
    let mut server = Server::start(Options {
        module: false,
        config_file: Some(conf.clone()),
        args: vec![],
    });
    let mut con = server.conn();
    let _: () = cmd("CONFIG")
        .arg("SET")
        .arg("emq.node-id")
        .arg("7")
        .arg("emq.max-attempts")
        .arg("3")
        .query(&mut con)
        .expect("config set");
    let _: () = cmd("CONFIG")
        .arg("REWRITE")
        .query(&mut con)
        .expect("config rewrite");
    let text = std::fs::read_to_string(&conf).expect("the rewritten file");
    let line = |l: &str| text.lines().position(|x| x == l);
    let load = text
        .lines()
        .position(|x| x.starts_with("loadmodule "))
        .expect("loadmodule kept");
    for setting in ["emq.node-id 7", "emq.max-attempts 3", "emq.lease-ms 5000"] {
        let at = line(setting).unwrap_or_else(|| panic!("{setting} in:\n{text}"));
        assert!(at > load, "{setting} after loadmodule:\n{text}");
    }

    server.restart(false);
    let mut con = server.conn();
    let cfg: Vec<String> = cmd("CONFIG")
        .arg("GET")
        .arg("emq.*")
        .query(&mut con)
        .expect("config get");
    for pair in [
        ["emq.node-id", "7"],
        ["emq.max-attempts", "3"],
        ["emq.lease-ms", "5000"],
    ] {
        assert!(cfg.chunks(2).any(|kv| kv == pair), "{pair:?} in {cfg:?}");
    }
}

#[test]
fn unload_is_refused_while_an_acl_rule_names_a_command() {
    // The server cannot unload a module whose commands an ACL rule names (Valkey 8.0 crashes
    // recomputing the rules): EchoMQ refuses, keeps running, and says why in the log. Valkey
    // 9.1 refuses such an unload itself before asking the module (valkey-io/valkey#3160), and
    // logs its own reason.
    let server = Server::start(Options::learning().arg("enable-module-command", "local"));
    let mut con = server.conn();
    let _: () = cmd("ACL")
        .arg("SETUSER")
        .arg("worker")
        .arg("on")
        .arg("nopass")
        .arg("~*")
        .arg("+emq.enqueue")
        .query(&mut con)
        .expect("ACL SETUSER");
    let err = expect_err(&mut con, cmd("MODULE").arg("UNLOAD").arg("emq"));
    assert!(err.contains("Error unloading module"), "{err}");
    assert_eq!(module_names(&mut con), vec!["emq".to_string()]);
    let log = server.log_tail();
    assert!(
        log.contains("ACL rules name its commands (worker +emq.enqueue)")
            || log.contains("one or more ACL users reference commands from this module"),
        "{log}"
    );
    // Everything still runs, the timer included.
    let q = unique_queue("kept");
    enqueue_delayed(&mut con, &q, &job_id(1), "x", 200);
    assert!(wait_until(Duration::from_secs(5), || set_len(
        &mut con, &q, "pending"
    ) == 1));

    // Once no rule names a command (here `-@all`; `+@emq` grants them by category where the
    // server has module categories), the module unloads and the server stays up.
    let _: () = cmd("ACL")
        .arg("SETUSER")
        .arg("worker")
        .arg("-@all")
        .query(&mut con)
        .expect("ACL SETUSER");
    unload(&mut con);
    let pong: String = cmd("PING").query(&mut con).expect("ping");
    assert_eq!(pong, "PONG");
}

#[test]
fn unload_is_refused_while_a_claim_waits_and_the_waiter_is_still_served() {
    // The server refuses to unload a module with blocked clients. EchoMQ stopped its timer when
    // the unload arrived; it is armed again, so a delayed job still reaches the waiter.
    let server = Server::start(Options::learning().arg("enable-module-command", "local"));
    let mut con = server.conn();
    let q = unique_queue("waiting");
    let claim = blocked_claim(&mut con, server.conn(), &q, 10_000);
    let err = expect_err(&mut con, cmd("MODULE").arg("UNLOAD").arg("emq"));
    assert!(err.contains("blocked clients"), "{err}");
    assert_eq!(module_names(&mut con), vec!["emq".to_string()]);
    enqueue_delayed(&mut con, &q, &job_id(1), "due soon", 200);
    let reply = claim.join().expect("claim thread").expect("a claim");
    let jobs: Vec<(String, String, i64)> = redis::from_redis_value(reply).expect("jobs");
    assert_eq!(jobs, vec![(job_id(1), "due soon".to_string(), 1)]);
    // With no one waiting, the unload goes through. The server counts a served waiter out of
    // the module's blocked clients on an event-loop turn after its reply is sent (Redis 7 may
    // read the next command first), so the unload is tried until that turn has come.
    let mut last = String::new();
    let unloaded = wait_until(Duration::from_secs(5), || {
        match cmd("MODULE").arg("UNLOAD").arg("emq").query::<()>(&mut con) {
            Ok(()) => true,
            Err(err) => {
                last = err.to_string();
                assert!(last.contains("blocked clients"), "{last}");
                false
            }
        }
    });
    assert!(unloaded, "MODULE UNLOAD still refused: {last}");
    assert!(module_names(&mut con).is_empty());
}

#[test]
fn move_and_copy_on_any_key_leave_the_client_in_its_database() {
    // Valkey 8.1 runs a module's keyspace callbacks on the client whose command fired the
    // event, after selecting the event's database on it, and did not select the client's own
    // back: with a module subscribed to generic events, as EchoMQ is, `MOVE` and `COPY ... DB`
    // left the client in the other database. EchoMQ selects it back. The correction runs on
    // Valkey 8.1 on (Debian 13's `make test` exercises it); older servers need none, and there
    // this checks that MOVE and COPY behave as without the module.
    let server = Server::start(Options::default());
    let mut con = server.conn();
    let here = |con: &mut Connection| -> Option<String> {
        cmd("GET").arg("only-in-db-0").query(con).expect("get")
    };
    let _: () = cmd("SET")
        .arg("only-in-db-0")
        .arg("x")
        .query(&mut con)
        .expect("set");
    for key in ["a", "b", "c"] {
        let _: () = cmd("SET").arg(key).arg("v").query(&mut con).expect("set");
    }

    let moved: i64 = cmd("MOVE").arg("a").arg(1).query(&mut con).expect("move");
    assert_eq!(
        (moved, here(&mut con).as_deref()),
        (1, Some("x")),
        "after MOVE"
    );
    let copied: i64 = cmd("COPY")
        .arg("b")
        .arg("b2")
        .arg("DB")
        .arg(2)
        .query(&mut con)
        .expect("copy");
    assert_eq!(
        (copied, here(&mut con).as_deref()),
        (1, Some("x")),
        "after COPY"
    );

    let replies: Vec<Value> = redis::pipe()
        .atomic()
        .cmd("COPY")
        .arg("b")
        .arg("b3")
        .arg("DB")
        .arg(3)
        .cmd("GET")
        .arg("only-in-db-0")
        .cmd("MOVE")
        .arg("c")
        .arg(4)
        .cmd("GET")
        .arg("only-in-db-0")
        .query(&mut con)
        .expect("transaction");
    let x = Value::BulkString(b"x".to_vec());
    assert_eq!(
        replies,
        vec![Value::Int(1), x.clone(), Value::Int(1), x],
        "inside a transaction"
    );
    assert_eq!(here(&mut con).as_deref(), Some("x"), "after it");

    let _: () = cmd("SET").arg("d").arg("v").query(&mut con).expect("set");
    let seen: Option<String> = cmd("EVAL")
        .arg("redis.call('MOVE', 'd', 5); return redis.call('GET', 'only-in-db-0')")
        .arg(0)
        .query(&mut con)
        .expect("script");
    assert_eq!(seen.as_deref(), Some("x"), "inside a script, after MOVE");
    assert_eq!(here(&mut con).as_deref(), Some("x"), "after the script");
    for (db, key) in [(1, "a"), (2, "b2"), (3, "b3"), (4, "c"), (5, "d")] {
        let mut other = server.conn();
        in_db(&mut other, db);
        let exists: i64 = cmd("EXISTS").arg(key).query(&mut other).expect("exists");
        assert_eq!(exists, 1, "{key} in database {db}");
    }
}
