//! Module and Lua speakers share a deployment: keys written by EMQ.ENQUEUE are DUMP-identical
//! to those the reference `@enqueue` script writes for the same input (protocol.md §5, §8).

use emq_harness as support;

use redis::cmd;
use support::*;

const ENQUEUE_LUA: &str = include_str!("../lua/enqueue.lua");

fn dump(con: &mut Connection, key: &str) -> Option<Vec<u8>> {
    cmd("DUMP").arg(key).query(con).expect("DUMP")
}

/// Enqueues `jobs` into two queues, one by the module and one by the script, and compares
/// every key's DUMP.
fn assert_same_dumps(con: &mut Connection, jobs: &[(String, Vec<u8>)]) {
    let by_module = unique_queue("mod");
    let by_lua = unique_queue("lua");
    let script = redis::Script::new(ENQUEUE_LUA);
    for (id, payload) in jobs {
        let a: i64 = cmd("EMQ.ENQUEUE")
            .arg(&by_module)
            .arg(id)
            .arg(payload)
            .query(con)
            .expect("module");
        let b: i64 = script
            .key(row_key(&by_lua, id))
            .key(set_key(&by_lua, "pending"))
            .arg(id)
            .arg(payload)
            .invoke(con)
            .expect("lua");
        assert_eq!(a, b, "same reply for {id}");
    }
    for (id, _) in jobs {
        let m = dump(con, &row_key(&by_module, id));
        let l = dump(con, &row_key(&by_lua, id));
        assert!(m.is_some());
        assert_eq!(m, l, "row {id}");
    }
    let m = dump(con, &set_key(&by_module, "pending"));
    let l = dump(con, &set_key(&by_lua, "pending"));
    assert!(m.is_some());
    assert_eq!(m, l, "pending set");
}

#[test]
fn small_rows_and_a_listpack_pending_set() {
    let server = Server::start_or_external();
    let mut con = server.conn();
    let jobs: Vec<_> = (1..=20)
        .map(|i| (job_id(i * 977), format!("payload {i}").into_bytes()))
        .collect();
    assert_same_dumps(&mut con, &jobs);
}

#[test]
fn large_payloads_and_a_skiplist_pending_set() {
    // Payloads over 64 bytes make hashtable rows; over 128 members make a skiplist zset.
    let server = Server::start_or_external();
    let mut con = server.conn();
    let mut rng = Rng::new(77);
    let jobs: Vec<_> = (0..300)
        .map(|i| {
            (
                job_id(rng.below(1 << 62)),
                vec![b'a' + (i % 26) as u8; 10 + (i as usize * 7) % 500],
            )
        })
        .collect();
    assert_same_dumps(&mut con, &jobs);
}

#[test]
fn binary_payloads_and_duplicates() {
    let server = Server::start_or_external();
    let mut con = server.conn();
    let mut jobs: Vec<_> = (0..10)
        .map(|i| (job_id(i), vec![0, b'\r', b'\n', 0xff, i as u8]))
        .collect();
    jobs.push((job_id(3), b"duplicate".to_vec()));
    jobs.push((job_id(11), Vec::new()));
    jobs.push((job_id(12), b"12345".to_vec())); // an integer-looking payload
    assert_same_dumps(&mut con, &jobs);
}

#[test]
fn the_script_and_the_module_refuse_kinds_alike() {
    let server = Server::start_or_external();
    let mut con = server.conn();
    let q = unique_queue("kind");
    let script = redis::Script::new(ENQUEUE_LUA);
    let lua_err = script
        .key(row_key(&q, "ORD0NgWEfAEJfs"))
        .key(set_key(&q, "pending"))
        .arg("ORD0NgWEfAEJfs")
        .arg("x")
        .invoke::<i64>(&mut con)
        .expect_err("lua refuses");
    let mod_err = expect_err(
        &mut con,
        cmd("EMQ.ENQUEUE").arg(&q).arg("ORD0NgWEfAEJfs").arg("x"),
    );
    assert_eq!(error_text(&lua_err), mod_err);
}

#[test]
fn a_claimer_blocked_in_the_module_is_woken_by_the_scripts_enqueue() {
    // A Lua speaker's job reaches a worker waiting in `EMQ.CLAIM`, whose lifecycle then runs
    // in the module, as if the module had enqueued it.
    let server = Server::start_or_external();
    let q = unique_queue("lua-wake");
    let script = redis::Script::new(ENQUEUE_LUA);
    let mut con = server.conn();
    for n in 1..=3u64 {
        let mut waiter = server.conn();
        let waiter_id: i64 = cmd("CLIENT").arg("ID").query(&mut waiter).expect("id");
        let queue = q.clone();
        let claimed = std::thread::spawn(move || claim(&mut waiter, &queue, &["BLOCK", "5000"]));
        assert!(
            wait_until(std::time::Duration::from_secs(5), || is_blocked(
                &mut con, waiter_id
            )),
            "the claim waits"
        );
        let id = job_id(n);
        let added: i64 = script
            .key(row_key(&q, &id))
            .key(set_key(&q, "pending"))
            .arg(&id)
            .arg("from lua")
            .invoke(&mut con)
            .expect("lua");
        assert_eq!(added, 1);
        let jobs = claimed.join().expect("waiter");
        assert_eq!(jobs, Some(vec![(id.clone(), b"from lua".to_vec(), 1)]));
        let acked: i64 = cmd("EMQ.ACK")
            .arg(&q)
            .arg(&id)
            .arg(1)
            .query(&mut con)
            .expect("ack");
        assert_eq!(acked, 1);
    }
}
