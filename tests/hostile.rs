//! Hostile input: random argument vectors to every EMQ.* command, sent by a RESP2 or RESP3
//! client or through another module's `RM_Call` with no user, never crash the server, and
//! every reply is a typed error or a well-formed value. Lifecycle commands (grouped jobs, group
//! pauses among them) on a queue whose keys, a grouped queue's bookkeeping and groups included,
//! are overwritten at random are refused with nothing written, or succeed.

use emq_harness as support;

use redis::{cmd, Value};
use support::*;

const ERROR_CODES: [&str; 18] = [
    "EMQQUEUE",
    "EMQSPAN",
    "EMQSPANNED",
    "EMQCRON",
    "EMQPARENT",
    "EMQLEASE",
    "EMQCANCELLED",
    "EMQSET",
    "EMQCURSOR",
    "EMQTYPE",
    "EMQID",
    "EMQKIND",
    "EMQKEY",
    "EMQPAYLOAD",
    "ERR",
    "WRONGTYPE",
    "NOPERM",
    "OOM",
];

fn random_arg(rng: &mut Rng) -> Vec<u8> {
    let tokens: [&[u8]; 50] = [
        b"CONCURRENCY",
        b"OF",
        b"INDEX",
        b"WAKE",
        b"orders~0-2",
        b"RATE",
        b"PER",
        b"OFF",
        b"UNIQUE",
        b"FOR",
        b"EVERY",
        b"*/5 * * * * *",
        b", * * * *",
        b"COUNT",
        b"PRIORITY",
        b"-1000000",
        b"DEAD",
        b"RESULT",
        b"PROGRESS",
        b"ON",
        b"off",
        b"MAXLEN",
        b"scheduled",
        b"dead",
        b"LEASE",
        b"BLOCK",
        b"DELAY",
        b"at",
        b"ERROR",
        b"RETRY-IN",
        b"0",
        b"1",
        b"2",
        b"30000",
        b"orders",
        b"*",
        b"job",
        b"pending",
        b"active",
        b"JOB0KHTOWnGLuC",
        b"ORD0NgWEfAEJfs",
        b"JOBAzL8n0Y58m7",
        b"JOBAzL8n0Y58m8",
        b"emq:{orders}:job:JOB0KHTOWnGLuC",
        b"{}",
        b"{",
        b"",
        b"-1",
        b"9223372036854775808",
        b"emq:{orders}:pending",
    ];
    match rng.below(6) {
        0 | 1 => rng.pick(&tokens).to_vec(),
        2 => rng.bytes(40, &(0u8..=255).collect::<Vec<_>>()),
        3 => {
            let mut k = b"emq:{".to_vec();
            k.extend(rng.bytes(6, b"ab{}:\x00"));
            k.extend_from_slice(b"}:job:JOB");
            k.extend(rng.bytes(12, b"0123456789AZaz{}"));
            k
        }
        4 => job_id(rng.next_u64() >> 1).into_bytes(),
        _ => vec![b'x'; rng.below(3000) as usize],
    }
}

fn check_reply(v: &Value) -> Result<(), String> {
    match v {
        Value::ServerError(e) => {
            if ERROR_CODES.contains(&e.code()) {
                Ok(())
            } else {
                Err(format!("untyped error {e:?}"))
            }
        }
        Value::Int(_)
        | Value::BulkString(_)
        | Value::Nil
        | Value::Okay
        | Value::SimpleString(_) => Ok(()),
        Value::Array(items) => items.iter().try_for_each(check_reply),
        Value::Map(pairs) => pairs
            .iter()
            .try_for_each(|(k, v)| check_reply(k).and(check_reply(v))),
        other => Err(format!("unexpected reply {other:?}")),
    }
}

#[test]
fn random_argument_vectors_never_crash_the_server() {
    let server = Server::start(
        Options::default()
            .arg("emq.max-payload-bytes", "2048")
            .arg("loadmodule", &caller_module()),
    );
    let mut con = server.conn();
    // Every other chunk goes over RESP3, where replies such as EMQ.STATS are maps.
    let mut con3 = server.conn3();
    // Every command the module registers, whatever is added later.
    let commands = emq_commands(&mut con);
    assert!(commands.len() >= 13, "{commands:?}");
    let mut rng = Rng::seeded(0xBAD5EED);
    let total = 100_000;
    let chunk = 1000;
    let mut errors = 0usize;
    for round in 0..total / chunk {
        let mut pipe = redis::pipe();
        pipe.ignore_errors();
        for _ in 0..chunk {
            let name = rng.pick(&commands).as_str();
            // One vector in five arrives through another module's RM_Call, with no user.
            let mut c = if rng.below(5) == 0 {
                let mut c = cmd("EMQCALLER.CALL");
                c.arg("AS-ROOT").arg(name);
                c
            } else {
                cmd(name)
            };
            for _ in 0..rng.below(7) {
                let arg = random_arg(&mut rng);
                // A blocking claim would stall the pipeline; the blocking path has its own tests.
                if name == "emq.claim" && arg.eq_ignore_ascii_case(b"BLOCK") {
                    c.arg("LEASE");
                } else {
                    c.arg(arg);
                }
            }
            pipe.add_command(c);
        }
        let client = if round % 2 == 0 { &mut con } else { &mut con3 };
        let replies: Vec<Value> = pipe
            .query(client)
            .unwrap_or_else(|e| panic!("the server answers every vector: {e}\n{}", server.log()));
        assert_eq!(replies.len(), chunk);
        for r in &replies {
            check_reply(r).unwrap_or_else(|e| panic!("{e}"));
            errors += matches!(r, Value::ServerError(_)) as usize;
        }
    }
    assert!(server.is_alive(), "the server is still up");
    assert!(
        errors > total / 10 && errors < total,
        "a mix of refusals and answers ({errors})"
    );
    // Some vectors wrote jobs (a purge among later vectors may have emptied the queue again).
    let enqueued = info_int(&mut con, "emq", "emq_enqueued");
    assert!(enqueued > 0, "the vectors reached a live queue: {enqueued}");
    assert!(
        !server.log_tail().contains("panicked"),
        "{}",
        server.log_tail()
    );
}

/// One random overwrite of a key of queue `q`: any type, rows with odd fields, set members
/// without a row, scores of ±inf, or the key deleted.
/// The keys of a queue besides its rows that a command may read or write: its sets, hashes
/// and stream, a grouped queue's bookkeeping and its groups' ready jobs.
const QUEUE_KEYS: [&str; 17] = [
    "pending", "active", "schedule", "dead", "meta", "events", "rate", "unique", "cron", "tally",
    "quotas", "held", "pauses", "groups", "turns", "group:g1", "group:g2",
];

/// The type each of [`QUEUE_KEYS`] holds.
fn wanted_type(key: &str) -> &'static str {
    let hash = [":meta", ":unique", ":cron", ":tally", ":quotas"]
        .iter()
        .any(|t| key.ends_with(t));
    if key.contains(":job:") || hash {
        "hash"
    } else if key.ends_with(":events") {
        "stream"
    } else {
        "zset"
    }
}

fn damage(rng: &mut Rng, q: &str, ids: &[String]) -> redis::Cmd {
    let key = match rng.below(10) {
        0..=4 => row_key(q, rng.pick(ids).as_str()),
        _ => {
            let ty: &&str = rng.pick(&QUEUE_KEYS[..]);
            set_key(q, ty)
        }
    };
    let member = if rng.below(4) == 0 {
        "JOB0000000000z".to_string() // a member with no row
    } else {
        rng.pick(ids).clone()
    };
    let mut c = redis::Cmd::new();
    match rng.below(8) {
        0 => c.arg("DEL").arg(&key),
        1 => c.arg("SET").arg(&key).arg("garbage"),
        2 => c.arg("RPUSH").arg(&key).arg("a"),
        3 => c.arg("SADD").arg(&key).arg("a"),
        4 | 5 => c
            .arg("HSET")
            .arg(&key)
            .arg("state")
            .arg(rng.pick(&["pending", "active", "scheduled", "dead", "done", "?"]))
            .arg("attempts")
            .arg(rng.pick(&["0", "1", "3", "-2", "x", "9223372036854775807"])),
        _ => {
            let now = now_ms();
            let score = match rng.below(5) {
                0 => "-inf".to_string(),
                1 => "+inf".to_string(),
                2 => "0".to_string(),
                3 => (now - 1000).to_string(),
                _ => (now + 600_000).to_string(),
            };
            c.arg("ZADD").arg(&key).arg(score).arg(member)
        }
    };
    c
}

/// A random, well-formed EchoMQ command on queue `q` (a claim never blocks inside `MULTI`).
fn lifecycle_command(rng: &mut Rng, q: &str, ids: &[String]) -> redis::Cmd {
    let id = rng.pick(ids).clone();
    let token = 1 + rng.below(3);
    match rng.below(10) {
        0 => {
            let mut c = cmd("EMQ.ENQUEUE");
            c.arg(q).arg(&id).arg("p");
            if rng.below(3) == 0 {
                c.arg("DELAY").arg(rng.below(2) * 600_000);
            }
            if rng.below(3) == 0 {
                c.arg("PRIORITY").arg(rng.below(5) as i64 - 2);
            }
            if rng.below(3) == 0 {
                c.arg("UNIQUE").arg(*rng.pick(&["u1", "u2"]));
                if rng.below(2) == 0 {
                    c.arg("FOR").arg(600_000);
                }
            }
            if rng.below(2) == 0 {
                c.arg("GROUP").arg(*rng.pick(&["g1", "g2"]));
            }
            c
        }
        1 => cmd("EMQ.MENQUEUE")
            .arg(q)
            .arg(&id)
            .arg("p")
            .arg(rng.pick(ids))
            .arg("q")
            .clone(),
        2 => cmd("EMQ.CLAIM")
            .arg(q)
            .arg("COUNT")
            .arg(1 + rng.below(3))
            .arg("LEASE")
            .arg(if rng.below(2) == 0 { 1 } else { 60_000 })
            .clone(),
        3 => cmd("EMQ.RENEW")
            .arg(q)
            .arg(&id)
            .arg(token)
            .arg(60_000)
            .clone(),
        4 => cmd("EMQ.ACK").arg(q).arg(&id).arg(token).clone(),
        5 => {
            let mut c = cmd("EMQ.FAIL");
            c.arg(q).arg(&id).arg(token);
            if rng.below(2) == 0 {
                c.arg("RETRY-IN").arg(rng.below(2) * 50);
            }
            c
        }
        6 if rng.below(3) == 0 => {
            let verb = *rng.pick(&["EMQ.PAUSE", "EMQ.RESUME"]);
            let group = *rng.pick(&["g1", "g2"]);
            cmd(verb).arg(q).arg("GROUP").arg(group).clone()
        }
        6 => cmd("EMQ.CANCEL").arg(q).arg(&id).clone(),
        7 => cmd("EMQ.REQUEUE").arg(q).arg(&id).clone(),
        8 => match rng.below(11) {
            8 => match rng.below(3) {
                0 => cmd("EMQ.LIMIT")
                    .arg(q)
                    .arg("CONCURRENCY")
                    .arg(1 + rng.below(3))
                    .clone(),
                1 => cmd("EMQ.LIMIT")
                    .arg(q)
                    .arg("RATE")
                    .arg(1 + rng.below(5))
                    .arg("PER")
                    .arg(600_000)
                    .clone(),
                _ => cmd("EMQ.LIMIT").arg(q).arg("OFF").clone(),
            },
            9 => cmd("EMQ.CRON")
                .arg(q)
                .arg(*rng.pick(&["c1", "c2"]))
                .arg("EVERY")
                .arg(600_000)
                .arg("p")
                .clone(),
            10 => cmd("EMQ.UNCRON")
                .arg(q)
                .arg(*rng.pick(&["c1", "c2"]))
                .clone(),
            0 => cmd("EMQ.PAUSE").arg(q).clone(),
            1 => cmd("EMQ.RESUME").arg(q).clone(),
            2 => cmd("EMQ.PURGE")
                .arg(q)
                .arg(*rng.pick(&["pending", "scheduled", "dead", "active"]))
                .arg("COUNT")
                .arg(1 + rng.below(3))
                .clone(),
            3 => cmd("EMQ.REQUEUE")
                .arg(q)
                .arg("DEAD")
                .arg("COUNT")
                .arg(2)
                .clone(),
            4 => match rng.below(2) {
                0 => cmd("EMQ.EVENTS")
                    .arg(q)
                    .arg("ON")
                    .arg("MAXLEN")
                    .arg(5)
                    .clone(),
                _ => cmd("EMQ.EVENTS").arg(q).arg("OFF").clone(),
            },
            5 => cmd("EMQ.ACK")
                .arg(q)
                .arg(&id)
                .arg(token)
                .arg("RESULT")
                .arg("r")
                .clone(),
            6 => cmd("EMQ.RENEW")
                .arg(q)
                .arg(&id)
                .arg(token)
                .arg(60_000)
                .arg("PROGRESS")
                .arg("p")
                .clone(),
            _ => cmd("EMQ.REQUEUE").arg(q).arg(&id).clone(),
        },
        _ => cmd("EMQ.STATS").arg(q).clone(),
    }
}

#[test]
fn on_a_damaged_queue_a_refused_command_changes_nothing() {
    // Keys of one queue are overwritten at random with every type and with odd rows and
    // scores, between random lifecycle commands. Each command runs between two `DEBUG DIGEST`s
    // in one transaction (so the timer cannot run in between): a refusal must be typed and
    // leave the dataset as it was. A replica without the module follows every step.
    let (primary, replica) = primary_and_replica(Options::without_module());
    let mut con = primary.conn();
    let q = "damaged";
    let ids: Vec<String> = (1..=5).map(job_id).collect();
    let mut rng = Rng::seeded(0xDA4A6E);
    let (mut refused, mut answered, mut changed) = (std::collections::BTreeMap::new(), 0, 0);
    for step in 0..5000 {
        if rng.below(8) == 0 {
            // Keys of another type deleted, as an operator would, so the queue works again.
            let mut keys: Vec<String> = ids.iter().map(|id| row_key(q, id)).collect();
            keys.extend(QUEUE_KEYS.map(|t| set_key(q, t)));
            for key in keys {
                let ty: String = cmd("TYPE").arg(&key).query(&mut con).expect("type");
                if ty != wanted_type(&key) && ty != "none" {
                    let _: i64 = cmd("DEL").arg(&key).query(&mut con).expect("del");
                }
            }
            continue;
        }
        if rng.below(4) == 0 {
            // A write to a key of another type is refused (WRONGTYPE): damage of another kind.
            let _ = damage(&mut rng, q, &ids).query::<Value>(&mut con);
            continue;
        }
        let command = lifecycle_command(&mut rng, q, &ids);
        let replies: Vec<Value> = redis::pipe()
            .atomic()
            .ignore_errors()
            .cmd("DEBUG")
            .arg("DIGEST")
            .add_command(command.clone())
            .cmd("DEBUG")
            .arg("DIGEST")
            .query(&mut con)
            .unwrap_or_else(|e| panic!("step {step}: {e}\n{}", primary.log_tail()));
        let [before, reply, after] = &replies[..] else {
            panic!("step {step}: {replies:?}");
        };
        check_reply(reply).unwrap_or_else(|e| panic!("step {step}: {e}"));
        if let Value::ServerError(e) = reply {
            // The keys whose type is not theirs, for the message.
            let damaged: Vec<String> = QUEUE_KEYS
                .iter()
                .map(|t| set_key(q, t))
                .filter(|key| {
                    let ty: String = cmd("TYPE").arg(key).query(&mut con).expect("type");
                    ty != wanted_type(key) && ty != "none"
                })
                .collect();
            assert_eq!(
                before,
                after,
                "step {step}: {:?} was refused ({e:?}) but changed the dataset (damaged: {damaged:?})",
                command
                    .args_iter()
                    .map(|a| match a {
                        redis::Arg::Simple(b) => String::from_utf8_lossy(b).into_owned(),
                        _ => "<cursor>".into(),
                    })
                    .collect::<Vec<_>>()
            );
            *refused.entry(e.code().to_string()).or_insert(0) += 1;
        } else {
            answered += 1;
            changed += (before != after) as usize;
        }
    }
    assert_eq!(info_int(&mut con, "emq", "emq_refused_internal"), 0);
    for code in ["WRONGTYPE", "EMQLEASE"] {
        assert!(
            refused.get(code).is_some_and(|&n| n > 50),
            "{code}: {refused:?}"
        );
    }
    assert!(
        answered > 500 && changed > 150,
        "answered {answered} (of which {changed} wrote), refused {refused:?}"
    );

    // Writes paused (the timer with them), the replica has every step.
    let _: () = cmd("CLIENT")
        .arg("PAUSE")
        .arg(10_000)
        .arg("WRITE")
        .query(&mut con)
        .expect("pause");
    let mut rep = replica.conn();
    wait_caught_up(&mut con, &mut rep);
    assert_eq!(digest(&mut con), digest(&mut rep), "the replica followed");
    let _: () = cmd("CLIENT")
        .arg("UNPAUSE")
        .query(&mut con)
        .expect("unpause");
    assert!(primary.is_alive() && !primary.log_tail().contains("panicked"));
}
