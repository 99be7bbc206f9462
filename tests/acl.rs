//! ACL on the real derived keys (protocol.md §5): a user limited to `~emq:{orders}:*` may enqueue to
//! and work on `orders` and gets NOPERM, logged in ACL LOG, with nothing written, for any other
//! queue.

use emq_harness as support;

use redis::{cmd, Value};
use support::*;

/// The rules of a worker that may use EchoMQ on the queue `orders` only.
const ORDERS_WORKER: [&str; 4] = ["resetkeys", "~emq:{orders}:*", "-@all", "+@emq"];

/// The newest `ACL LOG` entry, as text to search.
fn last_acl_log_entry(admin: &mut Connection) -> String {
    let log: Vec<Value> = cmd("ACL").arg("LOG").arg(1).query(admin).expect("ACL LOG");
    format!("{log:?}")
}

#[test]
fn a_queue_scoped_user_enqueues_only_to_its_queue() {
    let server = Server::start(Options::default());
    let mut admin = server.conn();
    let mut worker = user_with(&server, "worker", &ORDERS_WORKER);

    assert_eq!(
        enqueue(&mut worker, "orders", &job_id(1), "x"),
        1,
        "own queue"
    );
    let minted: String = cmd("EMQ.ENQUEUE")
        .arg("orders")
        .arg("*")
        .arg("x")
        .query(&mut worker)
        .expect("minted");
    assert!(minted.starts_with("JOB"));

    let err = expect_err(
        &mut worker,
        cmd("EMQ.ENQUEUE").arg("payments").arg(job_id(1)).arg("x"),
    );
    assert_eq!(err, "NOPERM No permissions to access a key");
    let keys = keys_of(&mut admin, "payments");
    assert!(
        keys.is_empty(),
        "nothing written for a refused queue: {keys:?}"
    );

    let entry = last_acl_log_entry(&mut admin);
    assert!(entry.contains("worker"), "{entry}");
    assert!(
        entry.contains("emq:{payments}:job:"),
        "the log names the derived key: {entry}"
    );
    assert!(entry.contains("key"), "{entry}");

    // The pure commands need no key permission; a command outside @emq stays refused.
    let slot: i64 = cmd("EMQ.SLOT")
        .arg("emq:{payments}:pending")
        .query(&mut worker)
        .expect("slot");
    assert!(slot >= 0);
    let err = expect_err(&mut worker, cmd("GET").arg("emq:{orders}:meta"));
    assert!(err.starts_with("NOPERM"), "{err}");
}

#[test]
fn a_read_only_user_cannot_enqueue() {
    let server = Server::start(Options::default());
    let mut admin = server.conn();
    let mut reader = user_with(&server, "reader", &["%R~emq:*", "+@all"]);
    let err = expect_err(
        &mut reader,
        cmd("EMQ.ENQUEUE").arg("orders").arg(job_id(1)).arg("x"),
    );
    assert!(err.starts_with("NOPERM"), "{err}");
    let n: i64 = cmd("DBSIZE").query(&mut admin).expect("dbsize");
    assert_eq!(n, 0);
}

#[test]
fn a_group_key_the_user_may_not_touch_is_refused_before_its_type_is_looked_at() {
    let server = Server::start(Options::default());
    let mut admin = server.conn();
    // Every key of `orders` but its groups' keys; group g's key holds a string.
    let mut worker = user_with(
        &server,
        "tenantless",
        &["~emq:{orders}:[^g]*", "~emq:{orders}:groups", "+@all"],
    );
    let _: () = cmd("SET")
        .arg("emq:{orders}:group:g")
        .arg("x")
        .query(&mut admin)
        .expect("set");
    let misses = |admin: &mut redis::Connection| -> i64 {
        let info: String = cmd("INFO").arg("stats").query(admin).expect("info");
        info.lines()
            .find_map(|l| l.strip_prefix("keyspace_misses:"))
            .and_then(|n| n.trim().parse().ok())
            .expect("keyspace_misses")
    };
    let before = misses(&mut admin);
    for (args, what) in [
        (
            vec!["EMQ.ENQUEUE", "orders", "*", "p", "GROUP", "g"],
            "enqueue",
        ),
        (vec!["EMQ.PAUSE", "orders", "GROUP", "g"], "pause"),
        (vec!["EMQ.LIMIT", "orders", "GROUP", "g"], "limit"),
        (
            vec!["EMQ.LIMIT", "orders", "GROUP", "h"],
            "limit of a missing group",
        ),
    ] {
        let err = expect_err(&mut worker, cmd(args[0]).arg(&args[1..]));
        assert!(err.starts_with("NOPERM"), "{what}: {err}");
    }
    // Refused before any lookup: not even a miss on the missing group's key.
    assert_eq!(misses(&mut admin), before);
}

#[test]
fn a_user_without_the_emq_category_is_refused_by_the_server() {
    let server = Server::start(Options::default());
    let mut plain = user_with(&server, "plain", &["~*", "+@all", "-@emq"]);
    let err = expect_err(&mut plain, &cmd("EMQ.VERSION"));
    assert!(err.starts_with("NOPERM"), "{err}");
    let v: String = cmd("PING").query(&mut plain).expect("other commands work");
    assert_eq!(v, "PONG");
}

#[test]
fn scripts_and_functions_run_echomq_as_their_caller() {
    let server = Server::start(Options::default());
    let mut admin = server.conn();
    let mut worker = user_with(
        &server,
        "worker",
        &[&ORDERS_WORKER[..], &["+eval", "+fcall"]].concat(),
    );
    let _: String = cmd("FUNCTION")
        .arg("LOAD")
        .arg(
            "#!lua name=emqtest\n\
             redis.register_function('enqueue', function(keys, args) \
             return redis.call('EMQ.ENQUEUE', args[1], args[2], 'from a function') end)",
        )
        .query(&mut admin)
        .expect("FUNCTION LOAD");
    // EMQ.ENQUEUE <queue> <id> through a script, and through the function loaded above.
    let eval = |queue: &str, id: &str| {
        let mut c = cmd("EVAL");
        c.arg("return redis.call('EMQ.ENQUEUE', ARGV[1], ARGV[2], 'from a script')")
            .arg(0)
            .arg(queue)
            .arg(id);
        c
    };
    let fcall = |queue: &str, id: &str| {
        let mut c = cmd("FCALL");
        c.arg("enqueue").arg(0).arg(queue).arg(id);
        c
    };

    let ok: i64 = eval("orders", &job_id(1))
        .query(&mut worker)
        .expect("a script on the worker's own queue");
    assert_eq!(ok, 1);
    let ok: i64 = fcall("orders", &job_id(2))
        .query(&mut worker)
        .expect("a function on the worker's own queue");
    assert_eq!(ok, 1);
    let payloads: Vec<String> = [1, 2]
        .iter()
        .map(|n| row_field(&mut admin, "orders", &job_id(*n), "payload").expect("a row"))
        .collect();
    assert_eq!(payloads, ["from a script", "from a function"]);

    for call in [eval("payments", &job_id(3)), fcall("payments", &job_id(3))] {
        let err = expect_err(&mut worker, &call);
        assert!(err.starts_with("NOPERM"), "{err}");
    }
    assert!(
        keys_of(&mut admin, "payments").is_empty(),
        "nothing written"
    );
    // The same script run by a user with the rights writes there: the refusal was the caller's.
    let ok: i64 = eval("payments", &job_id(3))
        .query(&mut admin)
        .expect("the admin's script");
    assert_eq!(ok, 1);
}

fn module_call(mode: &str, args: &[&str]) -> redis::Cmd {
    let mut c = cmd("EMQCALLER.CALL");
    c.arg(mode).arg(args);
    c
}

#[test]
fn other_modules_call_echomq_as_their_caller_or_with_every_right() {
    let server = Server::start(Options::default().arg("loadmodule", &caller_module()));
    let mut admin = server.conn();
    let mut worker = user_with(
        &server,
        "worker",
        &[&ORDERS_WORKER[..], &["+emqcaller.call"]].concat(),
    );
    let (one, two) = (job_id(1), job_id(2));

    // With the C flag, the call runs as the worker: its ACL holds on the derived keys.
    let ok: i64 = module_call("AS-CALLER", &["EMQ.ENQUEUE", "orders", &one, "x"])
        .query(&mut worker)
        .expect("own queue");
    assert_eq!(ok, 1);
    let err = expect_err(
        &mut worker,
        &module_call("AS-CALLER", &["EMQ.ENQUEUE", "payments", &one, "x"]),
    );
    assert!(err.starts_with("NOPERM"), "{err}");
    assert!(
        keys_of(&mut admin, "payments").is_empty(),
        "nothing written"
    );

    // Without it the call has no user, and every right, as for the server's own commands:
    // also through a script that such a call runs. The server stays up throughout.
    let ok: i64 = module_call("AS-ROOT", &["EMQ.ENQUEUE", "payments", &one, "x"])
        .query(&mut worker)
        .expect("a call without a user");
    assert_eq!(ok, 1);
    let script = "return redis.call('EMQ.ENQUEUE', 'payments', ARGV[1], 'y')";
    let ok: i64 = module_call("AS-ROOT", &["EVAL", script, "0", &two])
        .query(&mut worker)
        .expect("a script inside a call without a user");
    assert_eq!(ok, 1);
    let jobs: Vec<(String, String, i64)> =
        module_call("AS-ROOT", &["EMQ.CLAIM", "payments", "COUNT", "2"])
            .query(&mut worker)
            .expect("claim");
    assert_eq!(jobs.len(), 2);
    let acked: i64 = module_call("AS-ROOT", &["EMQ.ACK", "payments", &one, "1"])
        .query(&mut worker)
        .expect("ack");
    assert_eq!(acked, 1);
    let batch: Vec<i64> = module_call("AS-ROOT", &["EMQ.MENQUEUE", "payments", &job_id(3), "z"])
        .query(&mut worker)
        .expect("menqueue");
    assert_eq!(batch, vec![1]);
    let stats: Vec<(String, Option<i64>)> = module_call("AS-ROOT", &["EMQ.STATS", "payments"])
        .query(&mut worker)
        .expect("stats");
    assert_eq!(stats[0], ("pending".to_string(), Some(1)));
    // A module's call cannot block: a claim with nothing ready answers null at once.
    let nothing: Value = module_call("AS-ROOT", &["EMQ.CLAIM", "empty", "BLOCK", "0"])
        .query(&mut worker)
        .expect("claim");
    assert_eq!(nothing, Value::Nil);
    assert!(server.is_alive());

    // Finding out whether a call has a user leaves nothing in ACL LOG.
    let log: Value = cmd("ACL").arg("LOG").query(&mut admin).expect("acl log");
    let log = format!("{log:?}");
    assert!(!log.contains("probe"), "{log}");
    assert!(
        log.contains("payments"),
        "the worker's refusal is logged: {log}"
    );
}

#[test]
fn a_module_created_user_is_refused_with_a_reason() {
    // Such a user is outside the ACL list, so its key rules cannot be read: EchoMQ refuses
    // rather than guess, and says why.
    let server = Server::start(Options::default().arg("loadmodule", &caller_module()));
    let mut admin = server.conn();
    let mut client = server.conn();
    let _: () = cmd("EMQCALLER.LOGIN").query(&mut client).expect("login");
    let who: String = cmd("ACL").arg("WHOAMI").query(&mut client).expect("whoami");
    assert_eq!(who, "emqcaller-user");
    let err = expect_err(
        &mut client,
        cmd("EMQ.ENQUEUE").arg("orders").arg(job_id(1)).arg("x"),
    );
    assert!(
        err.starts_with("NOPERM EchoMQ cannot check the key permissions"),
        "{err}"
    );
    assert!(keys_of(&mut admin, "orders").is_empty(), "nothing written");
    // The user's own rights are intact for the server's commands.
    let _: () = cmd("SET")
        .arg("k")
        .arg("v")
        .query(&mut client)
        .expect("set");
    assert_eq!(info_int(&mut admin, "emq", "emq_refused_noperm"), 1);
}

#[test]
fn rules_changed_while_a_claim_waits_apply_when_it_is_woken() {
    // The server checks a command's ACL before it runs, but serves a blocked claim later
    // without looking again; EchoMQ looks again, as the server does for a native blocked
    // command. Revoking the command refuses the woken claim, and revoking the queue's keys
    // refuses it too; the job stays pending.
    let server = Server::start(Options::default());
    let mut admin = server.conn();
    for (revoke, logged) in [("-emq.claim", "command"), ("resetkeys", "key")] {
        let worker = user_with(&server, "worker", &ORDERS_WORKER);
        let blocked = blocked_claim(&mut admin, worker, "orders", 5_000);
        let _: () = cmd("ACL")
            .arg("SETUSER")
            .arg("worker")
            .arg(revoke)
            .query(&mut admin)
            .expect("ACL SETUSER");
        let _: () = cmd("ACL")
            .arg("LOG")
            .arg("RESET")
            .query(&mut admin)
            .expect("reset");
        enqueue(&mut admin, "orders", &job_id(1), "x");
        let reply = blocked.join().expect("waiter");
        assert!(
            reply.as_ref().is_err_and(|e| e.starts_with("NOPERM")),
            "{revoke}: {reply:?}"
        );
        assert_eq!(set_len(&mut admin, "orders", "pending"), 1, "{revoke}");
        let entry = last_acl_log_entry(&mut admin);
        assert!(entry.contains(logged), "{revoke}: {entry}");
        let _: i64 = cmd("DEL")
            .arg(set_key("orders", "pending"))
            .arg(row_key("orders", &job_id(1)))
            .query(&mut admin)
            .expect("del");
    }
}

#[test]
fn lifecycle_commands_check_acl_on_derived_keys() {
    let server = Server::start(Options::default());
    let mut admin = server.conn();
    let mut w = user_with(&server, "w", &["~emq:{orders}:*", "+@all"]);
    enqueue(&mut w, "orders", &job_id(1), "x");
    assert_eq!(claim(&mut w, "orders", &[]).map(|j| j.len()), Some(1));
    enqueue(&mut admin, "payments", &job_id(1), "x");
    for c in [
        cmd("EMQ.CLAIM").arg("payments").clone(),
        cmd("EMQ.STATS").arg("payments").clone(),
        cmd("EMQ.CANCEL").arg("payments").arg(job_id(1)).clone(),
        cmd("EMQ.ACK").arg("payments").arg(job_id(1)).arg(1).clone(),
    ] {
        let err = expect_err(&mut w, &c);
        assert!(err.starts_with("NOPERM"), "{err}");
    }
    assert_eq!(
        job_state(&mut admin, "payments", &job_id(1)).as_deref(),
        Some("pending")
    );
}
