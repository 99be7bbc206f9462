//! The whole life, batched: 100 jobs enqueued, claimed and settled together, five ways.

use std::io::Write;
use std::net::TcpStream;

use redis::cmd;

use super::{check_done, fresh_queue, Life, Policy, LIFE_BATCH};
use crate::commands::{
    claimed, claimed_next, encode_ack, encode_claim, encode_lua_enqueue, encode_mack,
    encode_native_enqueue, popped,
};
use crate::measure::{sample, server_usec, timed, Sample};
use crate::resp::{encode, read_replies, Window};
use crate::support::{row_key, set_key, Server};
use crate::workload::{now_unix_ms, reset_stats, CONNECTIONS, ENQUEUE_LUA, LIFE_LEASE_MS, PAYLOAD};

/// The bench's Lua claim and ack, the same transitions as `EMQ.CLAIM` and `EMQ.ACK`.
const CLAIM_LUA: &str = include_str!("../../lua/claim.lua");
const ACK_LUA: &str = include_str!("../../lua/ack.lua");

/// The whole life of `ids`, batched, as `how` runs it: each client enqueues 100 jobs and claims
/// 100 together, then settles them, until its share is done. A claim takes the queue's oldest
/// pending jobs, often another client's; it always finds as many as its own batch put in,
/// since no client claims more than it enqueued.
pub(super) fn whole_life(server: &Server, ids: &[String], policy: Policy, how: Life) -> Sample {
    let mut admin = server.conn();
    let queue = "life";
    fresh_queue(&mut admin, queue, policy);
    let mut load = |script: &str| -> String {
        cmd("SCRIPT")
            .arg("LOAD")
            .arg(script)
            .query(&mut admin)
            .expect("load")
    };
    let shas = [load(ENQUEUE_LUA), load(CLAIM_LUA), load(ACK_LUA)];
    reset_stats(&mut admin);
    let (pending, active) = (set_key(queue, "pending"), set_key(queue, "active"));
    let prefix = row_key(queue, "");
    let ttl = b"86400000";
    let batches: Vec<&[String]> = ids.chunks(LIFE_BATCH).collect();
    let work: Vec<_> = (0..CONNECTIONS)
        .map(|c| {
            // Per batch: its enqueues (with the claim, but for claim-next), and how many.
            let cycles: Vec<Window> = batches
                .iter()
                .skip(c)
                .step_by(CONNECTIONS)
                .map(|batch| {
                    let mut buf = Vec::new();
                    let count = batch.len().to_string();
                    match how {
                        Life::Acks | Life::Mack | Life::ClaimNext => {
                            let mut args: Vec<&[u8]> = vec![b"EMQ.MENQUEUE", queue.as_bytes()];
                            for id in batch.iter() {
                                args.push(id.as_bytes());
                                args.push(PAYLOAD);
                            }
                            encode(&mut buf, &args);
                            if how != Life::ClaimNext {
                                encode_claim(&mut buf, queue, batch.len());
                            }
                        }
                        Life::Lua => {
                            for id in batch.iter() {
                                encode_lua_enqueue(&mut buf, &shas[0], queue, &pending, id);
                            }
                            encode(
                                &mut buf,
                                &[
                                    b"EVALSHA",
                                    shas[1].as_bytes(),
                                    b"2",
                                    pending.as_bytes(),
                                    active.as_bytes(),
                                    count.as_bytes(),
                                    LIFE_LEASE_MS,
                                    prefix.as_bytes(),
                                ],
                            );
                        }
                        Life::Native => {
                            for id in batch.iter() {
                                encode_native_enqueue(&mut buf, queue, &pending, id);
                            }
                            encode(
                                &mut buf,
                                &[b"ZPOPMIN", pending.as_bytes(), count.as_bytes()],
                            );
                        }
                    }
                    (buf, batch.len())
                })
                .collect();
            let (queue, active, prefix, shas) =
                (queue, active.clone(), prefix.clone(), shas.clone());
            move |stream: &mut TcpStream, inbox: &mut Vec<u8>| {
                let mut out = Vec::new();
                let mut replies = Vec::new();
                // The jobs claimed and not yet settled (claim-next's carry from batch to batch).
                let mut held: Vec<(Vec<u8>, Vec<u8>)> = Vec::new();
                for (buf, jobs) in &cycles {
                    out.clear();
                    out.extend_from_slice(buf);
                    replies.clear();
                    let enqueues = match how {
                        Life::Acks | Life::Mack | Life::ClaimNext => 1,
                        Life::Lua | Life::Native => *jobs * if how == Life::Native { 2 } else { 1 },
                    };
                    if how == Life::ClaimNext {
                        if held.is_empty() {
                            encode_claim(&mut out, queue, *jobs);
                        } else {
                            encode_mack(&mut out, queue, &held, Some(*jobs));
                        }
                    }
                    stream.write_all(&out).expect("write");
                    read_replies(stream, inbox, enqueues + 1, Some(&mut replies));
                    let last = &replies[enqueues];
                    let got = match how {
                        Life::ClaimNext if held.is_empty() => claimed(last),
                        Life::ClaimNext => claimed_next(last),
                        Life::Native => popped(last)
                            .into_iter()
                            .map(|id| (id, Vec::new()))
                            .collect(),
                        _ => claimed(last),
                    };
                    assert_eq!(got.len(), *jobs, "the claim found the batch's jobs");
                    out.clear();
                    let settles = match how {
                        Life::ClaimNext => {
                            held = got;
                            continue;
                        }
                        Life::Acks => {
                            for (id, token) in &got {
                                encode_ack(&mut out, queue, id, token);
                            }
                            got.len()
                        }
                        Life::Mack => {
                            encode_mack(&mut out, queue, &got, None);
                            1
                        }
                        Life::Lua => {
                            for (id, token) in &got {
                                let row = [prefix.as_bytes(), id].concat();
                                encode(
                                    &mut out,
                                    &[
                                        b"EVALSHA",
                                        shas[2].as_bytes(),
                                        b"2",
                                        &row,
                                        active.as_bytes(),
                                        id,
                                        token,
                                        ttl,
                                    ],
                                );
                            }
                            got.len()
                        }
                        Life::Native => {
                            // The claim's second step, then the acks' round trip.
                            let deadline = (now_unix_ms() as i64 + 60_000).to_string();
                            let mut args: Vec<&[u8]> = vec![b"ZADD", active.as_bytes()];
                            for (id, _) in &got {
                                args.push(deadline.as_bytes());
                                args.push(id);
                            }
                            encode(&mut out, &args);
                            for (id, _) in &got {
                                let row = [prefix.as_bytes(), id].concat();
                                encode(&mut out, &[b"HSET", &row, b"state", b"active"]);
                                encode(&mut out, &[b"HINCRBY", &row, b"attempts", b"1"]);
                                encode(&mut out, &[b"HGET", &row, b"payload"]);
                            }
                            stream.write_all(&out).expect("write");
                            read_replies(stream, inbox, 1 + 3 * got.len(), None);
                            out.clear();
                            for (id, _) in &got {
                                let row = [prefix.as_bytes(), id].concat();
                                encode(&mut out, &[b"ZREM", active.as_bytes(), id]);
                                encode(&mut out, &[b"HSET", &row, b"state", b"done"]);
                                encode(&mut out, &[b"PEXPIRE", &row, ttl]);
                            }
                            3 * got.len()
                        }
                    };
                    stream.write_all(&out).expect("write");
                    read_replies(stream, inbox, settles, None);
                }
                if !held.is_empty() {
                    out.clear();
                    encode_mack(&mut out, queue, &held, None);
                    stream.write_all(&out).expect("write");
                    read_replies(stream, inbox, 1, None);
                }
            }
        })
        .collect();
    let (elapsed, cpu, _) = timed(server, &mut admin, work);
    check_done(&mut admin, queue, ids.len(), policy, how);
    let usec = server_usec(&mut admin, how.stats());
    sample(ids.len(), usec, cpu, elapsed)
}
