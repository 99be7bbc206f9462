//! Hostile input: random argument vectors to every EMQ.* command, sent by a RESP2 or RESP3
//! client or through another module's `RM_Call` with no user, never crash the server, and
//! every reply is a typed error or a well-formed value.

mod support;

use redis::{cmd, Value};
use support::*;

const ERROR_CODES: [&str; 11] = [
    "EMQQUEUE",
    "EMQLEASE",
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
    let tokens: [&[u8]; 27] = [
        b"COUNT",
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
        0 | 1 => tokens[rng.below(tokens.len() as u64) as usize].to_vec(),
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
    let mut rng = Rng::new(0xBAD5EED);
    let total = 100_000;
    let chunk = 1000;
    let mut errors = 0usize;
    for round in 0..total / chunk {
        let mut pipe = redis::pipe();
        pipe.ignore_errors();
        for _ in 0..chunk {
            let name = commands[rng.below(commands.len() as u64) as usize].as_str();
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
    let stats: Vec<(String, i64)> = cmd("EMQ.STATS")
        .arg("orders")
        .query(&mut con)
        .expect("stats");
    assert!(
        stats.iter().any(|(_, n)| *n > 0),
        "the vectors reached a live queue: {stats:?}"
    );
    assert!(
        !server.log_tail().contains("panicked"),
        "{}",
        server.log_tail()
    );
}
