//! An EchoMQ worker with the `redis` crate: block on EMQ.CLAIM, process, ACK or FAIL.
//!
//! ```sh
//! EMQ_PORT=6379 EMQ_QUEUE=orders cargo run --example worker
//! ```
//!
//! With `EMQ_IDLE_EXIT=1` it stops once no job arrived for one BLOCK period.

use std::env;

fn handle(payload: &[u8]) -> Result<(), String> {
    if payload.starts_with(b"fail") {
        return Err(format!(
            "cannot process {}",
            String::from_utf8_lossy(payload)
        ));
    }
    Ok(())
}

fn main() -> redis::RedisResult<()> {
    let host = env::var("EMQ_HOST").unwrap_or_else(|_| "127.0.0.1".into());
    let port = env::var("EMQ_PORT").unwrap_or_else(|_| "6379".into());
    let queue = env::var("EMQ_QUEUE").unwrap_or_else(|_| "orders".into());
    let idle_exit = env::var("EMQ_IDLE_EXIT").is_ok_and(|v| v == "1");
    let mut con = redis::Client::open(format!("redis://{host}:{port}/"))?.get_connection()?;
    loop {
        // Up to 10 jobs under a 30 s lease, waiting in the server up to 2 s for one.
        let jobs: Option<Vec<(String, Vec<u8>, i64)>> = redis::cmd("EMQ.CLAIM")
            .arg(&queue)
            .arg("COUNT")
            .arg(10)
            .arg("LEASE")
            .arg(30_000)
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
            match handle(&payload) {
                Ok(()) => {
                    let _: i64 = redis::cmd("EMQ.ACK")
                        .arg(&queue)
                        .arg(&id)
                        .arg(token)
                        .query(&mut con)?;
                    println!("done {id}");
                }
                Err(e) => {
                    let outcome: String = redis::cmd("EMQ.FAIL")
                        .arg(&queue)
                        .arg(&id)
                        .arg(token)
                        .arg("ERROR")
                        .arg(e)
                        .query(&mut con)?;
                    println!("{outcome} {id}");
                }
            }
        }
    }
}
