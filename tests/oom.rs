//! Under maxmemory, EMQ.ENQUEUE (`write deny-oom`) is refused and writes nothing, while the
//! pure commands keep answering.

mod support;

use redis::cmd;
use support::*;

#[test]
fn maxmemory_refuses_the_write_and_writes_nothing() {
    let server = Server::start(Options::default());
    let mut con = server.conn();
    let _: () = cmd("CONFIG")
        .arg("SET")
        .arg("maxmemory")
        .arg("1")
        .query(&mut con)
        .expect("maxmemory");
    let err = expect_err(
        &mut con,
        cmd("EMQ.ENQUEUE").arg("orders").arg(job_id(1)).arg("x"),
    );
    assert!(err.starts_with("OOM"), "{err}");
    let _: () = cmd("CONFIG")
        .arg("SET")
        .arg("maxmemory")
        .arg("0")
        .query(&mut con)
        .expect("reset");
    let n: i64 = cmd("DBSIZE").query(&mut con).expect("dbsize");
    assert_eq!(n, 0, "nothing written under OOM");
    let _: () = cmd("CONFIG")
        .arg("SET")
        .arg("maxmemory")
        .arg("1")
        .query(&mut con)
        .expect("maxmemory");
    let slot: i64 = cmd("EMQ.SLOT")
        .arg("orders")
        .query(&mut con)
        .expect("pure commands still answer");
    assert_eq!(slot, 105);
}
