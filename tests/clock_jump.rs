//! The server's wall clock stepped forward and back, as an NTP correction or a bad clock does,
//! under a preload shim of the project's own (scripts/clock-shift-shim.c): leases and due times
//! are wall-clock times, so a jump forward makes them come due at once and the tokens fence the
//! old holders; a jump back holds them longer; minted ids keep increasing either way.

use emq_harness as support;

use std::time::Duration;

use redis::cmd;
use support::*;

/// A server whose wall clock is the real one plus the milliseconds written to `clock`.
fn server_with_clock(clock: &std::path::Path) -> Server {
    std::fs::write(clock, "0").expect("the clock file");
    let shim = preload_shim("clock-shift-shim").display().to_string();
    let file = clock.display().to_string();
    Server::start_with_env(
        Options::default(),
        &[
            ("LD_PRELOAD", shim.as_str()),
            ("ECHOMQ_CLOCK_FILE", file.as_str()),
        ],
    )
}

/// The server's `TIME`, in unix ms.
fn server_ms(con: &mut Connection) -> i64 {
    let (secs, micros): (i64, i64) = cmd("TIME").query(con).expect("time");
    secs * 1000 + micros / 1000
}

/// Moves the server's clock to `offset_ms` from the real time, and waits until its `TIME` shows
/// it (the shim reads the file again every 20 ms).
fn set_clock(clock: &std::path::Path, con: &mut Connection, offset_ms: i64) {
    std::fs::write(clock, offset_ms.to_string()).expect("write the clock file");
    let moved = wait_until(Duration::from_secs(10), || {
        (server_ms(con) - now_ms() - offset_ms).abs() < 5_000
    });
    assert!(
        moved,
        "the server's clock is {offset_ms} ms off the real one"
    );
}

fn claimed(con: &mut Connection, q: &str, args: &[&str]) -> Vec<(String, i64)> {
    claim(con, q, args)
        .unwrap_or_default()
        .into_iter()
        .map(|(id, _, attempts)| (id, attempts))
        .collect()
}

#[test]
fn a_jump_forward_brings_due_jobs_and_expired_leases_back_and_fences_the_old_holder() {
    let dir = tempfile::tempdir().expect("tempdir");
    let clock = dir.path().join("clock");
    let server = server_with_clock(&clock);
    let mut con = server.conn();
    let q = "jump";
    enqueue(&mut con, q, &job_id(1), "leased");
    enqueue_delayed(&mut con, q, &job_id(2), "delayed", 60_000);
    assert_eq!(
        claimed(&mut con, q, &["LEASE", "60000"]),
        [(job_id(1), 1)],
        "the delayed job waits a minute"
    );

    set_clock(&clock, &mut con, 120_000);
    let mut after: Vec<(String, i64)> = claimed(&mut con, q, &["COUNT", "10", "LEASE", "60000"]);
    after.sort();
    assert_eq!(
        after,
        [(job_id(1), 2), (job_id(2), 1)],
        "the lease ran out and the delayed job came due, both at the jump"
    );
    let stale = expect_err(&mut con, cmd("EMQ.ACK").arg(q).arg(job_id(1)).arg(1));
    assert!(stale.starts_with("EMQLEASE"), "{stale}");
    let acked: i64 = cmd("EMQ.ACK")
        .arg(q)
        .arg(job_id(1))
        .arg(2)
        .query(&mut con)
        .expect("the new holder acks");
    assert_eq!(acked, 1);
}

#[test]
fn a_jump_back_holds_leases_and_due_times_and_minted_ids_keep_increasing() {
    let dir = tempfile::tempdir().expect("tempdir");
    let clock = dir.path().join("clock");
    let server = server_with_clock(&clock);
    let mut con = server.conn();
    let q = "back";
    let mint = |con: &mut Connection| -> String {
        cmd("EMQ.ENQUEUE")
            .arg(q)
            .arg("*")
            .arg("minted")
            .query(con)
            .expect("minted")
    };
    let before = mint(&mut con);
    assert_eq!(
        claimed(&mut con, q, &["LEASE", "1000"]),
        [(before.clone(), 1)]
    );
    enqueue_delayed(&mut con, q, &job_id(9), "delayed", 1_000);

    set_clock(&clock, &mut con, -120_000);
    let after = mint(&mut con);
    assert!(
        after > before,
        "an id minted after the clock stepped back ({after}) sorts after one minted before ({before})"
    );
    // A claim now finds the id minted after the jump, and neither the lease of a second nor the
    // job due in a second: two minutes of the server's time have not passed for either.
    assert_eq!(claimed(&mut con, q, &["COUNT", "10"]), [(after.clone(), 1)]);
    let counts = stats(&mut con, q);
    assert_eq!(counts.get("active"), Some(&2), "both leases held");
    assert_eq!(counts.get("scheduled"), Some(&1), "the job still waits");

    // Ten minutes ahead of the real time: every lease has run out and the job is due.
    set_clock(&clock, &mut con, 600_000);
    let mut back = claimed(&mut con, q, &["COUNT", "10"]);
    back.sort();
    let mut expected = vec![(before, 2), (after, 2), (job_id(9), 1)];
    expected.sort();
    assert_eq!(back, expected, "the leases ran out and the job came due");
}
