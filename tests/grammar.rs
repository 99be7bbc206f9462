//! The grammar commands on a real server: EMQ.KEY, EMQ.SLOT, EMQ.DECODE, EMQ.VERSION, and
//! the seeds' transcript (F1 the map, F2 the gate, F5 co-location).

use emq_harness as support;

use redis::{cmd, Value};
use support::*;

fn key(args: &[&str]) -> redis::Cmd {
    let mut c = cmd("EMQ.KEY");
    for a in args {
        c.arg(*a);
    }
    c
}

#[test]
fn f1_the_map() {
    let server = Server::start_or_external();
    let mut con = server.conn();
    let pending: String = key(&["orders", "pending"])
        .query(&mut con)
        .expect("pending");
    assert_eq!(pending, "emq:{orders}:pending");
    let row: String = key(&["orders", "job", "ORD0NgWEfAEJfs"])
        .query(&mut con)
        .expect("row");
    assert_eq!(row, "emq:{orders}:job:ORD0NgWEfAEJfs");
    for ty in ["active", "schedule", "dead", "meta", "events"] {
        let k: String = key(&["orders", ty]).query(&mut con).expect("type");
        assert_eq!(k, format!("emq:{{orders}}:{ty}"));
    }
    let version: String = cmd("EMQ.VERSION").query(&mut con).expect("version");
    assert_eq!(version, "echomq:2.0.0");
}

#[test]
fn f2_the_job_position_is_gated() {
    let server = Server::start_or_external();
    let mut con = server.conn();
    for bad in ["12345678901234", "order-12345678"] {
        let err = expect_err(&mut con, &key(&["orders", "job", bad]));
        assert!(err.starts_with("EMQID "), "{err}");
    }
    // Kind policy is not the key's question: any well-formed kind composes.
    let ok: String = key(&["orders", "job", "ORD0NgWEfAEJfs"])
        .query(&mut con)
        .expect("any kind");
    assert!(ok.ends_with("ORD0NgWEfAEJfs"));
}

#[test]
fn key_refusals() {
    let server = Server::start_or_external();
    let mut con = server.conn();
    assert!(expect_err(&mut con, &key(&["orders", "ready"])).starts_with("EMQTYPE "));
    assert!(expect_err(&mut con, &key(&["orders", "PENDING"])).starts_with("EMQTYPE "));
    assert!(expect_err(&mut con, &key(&["a{b", "pending"])).starts_with("EMQQUEUE "));
    assert!(expect_err(&mut con, &key(&["", "pending"])).starts_with("EMQQUEUE "));
    assert!(expect_err(&mut con, &key(&["orders", "job"])).starts_with("ERR "));
    assert!(
        expect_err(&mut con, &key(&["orders", "pending", "JOB0KHTOWnGLuC"])).starts_with("ERR ")
    );
    assert!(expect_err(&mut con, &key(&["orders"])).starts_with("ERR wrong number"));
}

#[test]
fn f5_co_location() {
    let server = Server::start_or_external();
    let mut con = server.conn();
    let slot =
        |con: &mut Connection, k: &str| -> i64 { cmd("EMQ.SLOT").arg(k).query(con).expect("slot") };
    for k in [
        "emq:{orders}:pending",
        "emq:{orders}:active",
        "emq:{orders}:meta",
        "emq:{orders}:job:JOB0KHTOWnGLuC",
    ] {
        assert_eq!(slot(&mut con, k), 105, "{k}");
    }
    assert_eq!(slot(&mut con, "emq:{fills}:pending"), 4165);
    assert_eq!(slot(&mut con, "emq:{quotes}:pending"), 3378);
    assert_eq!(slot(&mut con, "123456789"), 12739);
}

fn decode_map(con: &mut Connection, k: &[u8]) -> Vec<(String, Value)> {
    let v: Value = cmd("EMQ.DECODE").arg(k).query(con).expect("decode");
    map_pairs(&v)
}

#[test]
fn decode_reads_the_workshop_key() {
    let server = Server::start_or_external();
    let mut con = server.conn3();
    let m = decode_map(&mut con, b"emq:{quotes}:job:JOB0KHTOWnGLuC");
    let b = |s: &str| Value::BulkString(s.as_bytes().to_vec());
    assert_eq!(
        m,
        vec![
            ("queue".into(), b("quotes")),
            ("type".into(), b("job")),
            ("id".into(), b("JOB0KHTOWnGLuC")),
            ("kind".into(), b("JOB")),
            ("slot".into(), Value::Int(3378)),
            ("group".into(), Value::Nil),
        ]
    );
    let m = decode_map(&mut con, b"emq:{orders}:pending");
    assert_eq!(m[2], ("id".into(), Value::Nil));
    assert_eq!(m[4], ("slot".into(), Value::Int(105)));
    // The deployment's keys (README: named with a null queue, in slot 9051).
    for name in ["version", "locks"] {
        let m = decode_map(&mut con, format!("{{emq}}:{name}").as_bytes());
        assert_eq!(m[0], ("queue".into(), Value::Nil));
        assert_eq!(m[1], ("type".into(), b(name)));
        assert_eq!(m[4], ("slot".into(), Value::Int(9051)));
    }
}

#[test]
fn decode_under_resp2_is_a_flat_array() {
    let server = Server::start_or_external();
    let mut con = server.conn();
    let v: Vec<Value> = cmd("EMQ.DECODE")
        .arg("emq:{orders}:pending")
        .query(&mut con)
        .expect("decode");
    assert_eq!(v.len(), 12);
}

#[test]
fn decode_names_keys_outside_the_grammar_malformed() {
    let server = Server::start_or_external();
    let mut con = server.conn();
    for bad in [
        "emq:{orders}:job:12345678901234",
        "emq:{orders}:bogus",
        "emq:orders:pending",
        "emq:{}:pending",
        "plain",
        "{emq}:other",
    ] {
        let err = expect_err(&mut con, cmd("EMQ.DECODE").arg(bad));
        assert!(err.starts_with("EMQKEY "), "{bad}: {err}");
    }
}

#[test]
fn slot_equals_cluster_keyslot_for_random_keys() {
    let server = Server::start(
        Options::default()
            .arg("cluster-enabled", "yes")
            .arg("cluster-config-file", "nodes.conf"),
    );
    let mut con = server.conn();
    let mut rng = Rng::new(0x5107);
    // Every byte, with braces weighted up so most keys carry one or more (possibly empty) tags.
    let alphabet: Vec<u8> = (0u8..=255).chain([b'{'; 40]).chain([b'}'; 40]).collect();
    let keys: Vec<Vec<u8>> = (0..5000).map(|_| rng.bytes(24, &alphabet)).collect();
    let mut ours = redis::pipe();
    let mut theirs = redis::pipe();
    for k in &keys {
        ours.cmd("EMQ.SLOT").arg(k.as_slice());
        theirs.cmd("CLUSTER").arg("KEYSLOT").arg(k.as_slice());
    }
    let a: Vec<i64> = ours.query(&mut con).expect("EMQ.SLOT");
    let b: Vec<i64> = theirs.query(&mut con).expect("CLUSTER KEYSLOT");
    let braces = keys
        .iter()
        .filter(|k| k.contains(&b'{') && k.contains(&b'}'))
        .count();
    assert!(braces > 500, "the sample exercises hashtags ({braces})");
    for ((k, x), y) in keys.iter().zip(&a).zip(&b) {
        assert_eq!(x, y, "slot of {k:?}");
    }
}

/// The value of `name` in a map reply's pairs.
fn field<'a>(pairs: &'a [(String, Value)], name: &str) -> &'a Value {
    &pairs
        .iter()
        .find(|(k, _)| k == name)
        .unwrap_or_else(|| panic!("no {name} in {pairs:?}"))
        .1
}

#[test]
fn command_docs_give_delay_and_at_as_one_optional_choice() {
    let server = Server::start_or_external();
    let mut con = server.conn3();
    let docs: Value = cmd("COMMAND")
        .arg("DOCS")
        .arg("emq.enqueue")
        .query(&mut con)
        .expect("docs");
    let doc = map_pairs(field(&map_pairs(&docs), "emq.enqueue"));
    let Value::Array(args) = field(&doc, "arguments") else {
        panic!("arguments: {doc:?}")
    };
    let args: Vec<Vec<(String, Value)>> = args.iter().map(map_pairs).collect();
    let names: Vec<String> = args.iter().map(|a| text(field(a, "name"))).collect();
    assert_eq!(
        names,
        [
            "queue", "id", "payload", "due", "priority", "unique", "timeout", "group", "headers",
            "children", "parent"
        ]
    );
    let due = &args[3];
    assert_eq!(text(field(due, "type")), "oneof");
    assert_eq!(
        format!("{:?}", field(due, "flags"))
            .matches("optional")
            .count(),
        1
    );
    let Value::Array(choices) = field(due, "arguments") else {
        panic!("choices: {due:?}")
    };
    let choices: Vec<(String, String, bool)> = choices
        .iter()
        .map(|c| {
            let c = map_pairs(c);
            let optional = c.iter().any(|(k, _)| k == "flags");
            (text(field(&c, "token")), text(field(&c, "type")), optional)
        })
        .collect();
    assert_eq!(
        choices,
        [
            ("DELAY".to_string(), "integer".to_string(), false),
            ("AT".to_string(), "integer".to_string(), false)
        ]
    );
}

#[test]
fn command_docs_describe_every_command() {
    let server = Server::start_or_external();
    let mut con = server.conn();
    for (name, args) in [
        ("emq.enqueue", vec!["queue", "id", "payload"]),
        ("emq.key", vec!["queue", "type", "id"]),
        ("emq.slot", vec!["key"]),
        ("emq.decode", vec!["key"]),
        ("emq.version", vec![]),
        (
            "emq.menqueue",
            vec!["queue", "job", "id", "payload", "block"],
        ),
        (
            "emq.claim",
            vec!["queue", "count", "lease", "block", "COUNT"],
        ),
        ("emq.renew", vec!["queue", "id", "token", "ms"]),
        ("emq.ack", vec!["queue", "id", "token"]),
        (
            "emq.fail",
            vec!["queue", "id", "token", "error", "retry-in", "RETRY-IN"],
        ),
        ("emq.cancel", vec!["queue", "id"]),
        ("emq.requeue", vec!["queue", "id"]),
        ("emq.stats", vec!["queue"]),
    ] {
        let docs: Value = cmd("COMMAND")
            .arg("DOCS")
            .arg(name)
            .query(&mut con)
            .expect("docs");
        let text = format!("{docs:?}");
        assert!(text.contains("summary"), "{name}: {text}");
        for a in args {
            assert!(
                text.contains(&format!("\"{a}\"")) || text.contains(&format!("{:?}", a.as_bytes())),
                "{name} documents {a}: {text}"
            );
        }
    }
}

#[test]
fn pure_commands_are_readonly_fast_and_enqueue_is_write_denyoom() {
    let server = Server::start_or_external();
    let mut con = server.conn();
    let info: Vec<Value> = cmd("COMMAND")
        .arg("INFO")
        .arg("emq.enqueue")
        .arg("emq.slot")
        .query(&mut con)
        .expect("info");
    let text = format!("{info:?}");
    let enqueue = format!("{:?}", info[0]);
    let slot = format!("{:?}", info[1]);
    // Module ACL categories exist on Valkey 8 (and Redis 7.4+); on Redis 7.0 the module loads
    // without one and says so in the log.
    let categories = info_field(&mut con, "server", "valkey_version").is_some();
    for flag in ["write", "denyoom", "not_key"] {
        assert!(enqueue.contains(flag), "enqueue has {flag}: {enqueue}");
    }
    for flag in ["readonly", "fast"] {
        assert!(slot.contains(flag), "slot has {flag}: {slot}");
    }
    if categories {
        assert!(enqueue.contains("@emq") && slot.contains("@emq"), "{text}");
    }
    assert!(!slot.contains("write"), "{text}");
    // The queue's key spec says how the derived keys are used: read-only for EMQ.STATS.
    let specs: Vec<Value> = cmd("COMMAND")
        .arg("INFO")
        .arg("emq.enqueue")
        .arg("emq.stats")
        .query(&mut con)
        .expect("info");
    let spec_flags = |info: &Value| -> Vec<String> {
        let Value::Array(fields) = info else {
            panic!("COMMAND INFO entry: {info:?}")
        };
        let Some(Value::Array(specs)) = fields.get(8) else {
            panic!("key specs: {info:?}")
        };
        let Some(Value::Array(spec)) = specs.first() else {
            panic!("one key spec: {info:?}")
        };
        let at = spec
            .iter()
            .position(|v| matches!(v, Value::BulkString(b) if b == b"flags"))
            .expect("flags field");
        let Some(Value::Array(flags)) = spec.get(at + 1) else {
            panic!("flags: {spec:?}")
        };
        flags
            .iter()
            .map(|f| match f {
                Value::SimpleString(s) => s.clone(),
                other => panic!("flag: {other:?}"),
            })
            .collect()
    };
    assert_eq!(spec_flags(&specs[0]), ["RW", "update", "not_key"]);
    assert_eq!(spec_flags(&specs[1]), ["RO", "access", "not_key"]);
}
