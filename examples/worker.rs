//! An EchoMQ worker with the `redis` crate: block on EMQ.CLAIM, process, ACK or FAIL.
//!
//! ```sh
//! EMQ_PORT=6379 EMQ_QUEUE=orders cargo run --example worker
//! ```
//!
//! `EMQ_LEASE_MS` sets the lease (default 30000). With `EMQ_IDLE_EXIT=1` it stops once no job
//! arrived for one BLOCK period.

use std::env;
use std::thread;
use std::time::Duration;

use redis::{Connection, FromRedisValue, RedisResult};

fn handle(payload: &[u8]) -> Result<(), String> {
    if payload.starts_with(b"slow") {
        thread::sleep(Duration::from_secs(1));
    }
    if payload.starts_with(b"fail") {
        return Err(format!(
            "cannot process {}",
            String::from_utf8_lossy(payload)
        ));
    }
    Ok(())
}

/// `EMQ.ACK` or `EMQ.FAIL` with the claim's token; `None` if the lease ran out first and the
/// job went back to the queue (another attempt has it now, or will).
fn settle<T: FromRedisValue>(con: &mut Connection, cmd: &redis::Cmd) -> RedisResult<Option<T>> {
    match cmd.query(con) {
        Ok(reply) => Ok(Some(reply)),
        Err(e) if e.code() == Some("EMQLEASE") => Ok(None),
        Err(e) => Err(e),
    }
}

fn main() -> RedisResult<()> {
    let host = env::var("EMQ_HOST").unwrap_or_else(|_| "127.0.0.1".into());
    let port = env::var("EMQ_PORT").unwrap_or_else(|_| "6379".into());
    let queue = env::var("EMQ_QUEUE").unwrap_or_else(|_| "orders".into());
    let lease_ms: u64 = env::var("EMQ_LEASE_MS").map_or(30_000, |v| v.parse().unwrap_or(30_000));
    let idle_exit = env::var("EMQ_IDLE_EXIT").is_ok_and(|v| v == "1");
    let mut con = redis::Client::open(format!("redis://{host}:{port}/"))?.get_connection()?;
    loop {
        // Up to 10 jobs under the lease, waiting in the server up to 2 s for one.
        let jobs: Option<Vec<(String, Vec<u8>, i64)>> = redis::cmd("EMQ.CLAIM")
            .arg(&queue)
            .arg("COUNT")
            .arg(10)
            .arg("LEASE")
            .arg(lease_ms)
            .arg("BLOCK")
            .arg(2_000)
            .query(&mut con)?;
        let Some(jobs) = jobs else {
            if idle_exit {
                return Ok(());
            }
            continue;
        };
        for (id, payload, token) in jobs {
            let lease_command = |name: &str| {
                let mut c = redis::cmd(name);
                c.arg(&queue).arg(&id).arg(token);
                c
            };
            let outcome: Option<String> = match handle(&payload) {
                Ok(()) => {
                    settle::<i64>(&mut con, &lease_command("EMQ.ACK"))?.map(|_| "done".to_string())
                }
                Err(e) => settle(&mut con, lease_command("EMQ.FAIL").arg("ERROR").arg(e))?,
            };
            println!("{} {id}", outcome.as_deref().unwrap_or("lost"));
        }
    }
}
