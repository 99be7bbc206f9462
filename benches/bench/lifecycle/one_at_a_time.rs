//! The whole life one job at a time, each transition (enqueue, claim, ack) timed on its own.

use std::net::TcpStream;

use redis::cmd;

use super::{check_done, fresh_queue, Life, Policy};
use crate::commands::{claimed, encode_ack, encode_claim};
use crate::measure::{sample, server_usec, timed, Sample};
use crate::resp::{encode, exchange, Window};
use crate::support::{self, set_key, Server};
use crate::workload::{CONNECTIONS, PAYLOAD};

/// The life of `ids` one job at a time, each transition timed on its own: every job enqueued
/// with `EMQ.ENQUEUE`, then claimed with `EMQ.CLAIM COUNT 1`, then acknowledged, `depth`
/// commands in flight per client. The acks are encoded from the claims' replies before their
/// clock starts. Samples for the enqueues, the claims, the acks and the three together.
pub(super) fn one_at_a_time(
    server: &Server,
    ids: &[String],
    policy: Policy,
    depth: usize,
) -> [Sample; 4] {
    let mut admin = server.conn();
    let queue = "life";
    fresh_queue(&mut admin, queue, policy);
    let shares: Vec<Vec<&String>> = (0..CONNECTIONS)
        .map(|c| ids.iter().skip(c).step_by(CONNECTIONS).collect())
        .collect();
    let windows = |commands: Vec<Vec<u8>>| -> Vec<Window> {
        commands
            .chunks(depth)
            .map(|w| (w.concat(), w.len()))
            .collect()
    };
    let send = |windows: Vec<Window>, keep: bool| {
        move |stream: &mut TcpStream, inbox: &mut Vec<u8>| exchange(stream, inbox, &windows, keep)
    };

    let enqueues: Vec<_> = shares
        .iter()
        .map(|share| {
            let commands = share
                .iter()
                .map(|id| {
                    let mut buf = Vec::new();
                    let mut args: Vec<&[u8]> =
                        vec![b"EMQ.ENQUEUE", queue.as_bytes(), id.as_bytes(), PAYLOAD];
                    if policy == Policy::Unique {
                        args.extend([&b"UNIQUE"[..], id.as_bytes()]);
                    }
                    encode(&mut buf, &args);
                    buf
                })
                .collect();
            send(windows(commands), false)
        })
        .collect();
    let (enqueue_s, enqueue_cpu, _) = timed(server, &mut admin, enqueues);
    let card: usize = cmd("ZCARD")
        .arg(set_key(queue, "pending"))
        .query(&mut admin)
        .expect("zcard");
    assert_eq!(card, ids.len(), "every job pending");

    let mut claim = Vec::new();
    encode_claim(&mut claim, queue, 1);
    let claims: Vec<_> = shares
        .iter()
        .map(|share| send(windows(vec![claim.clone(); share.len()]), true))
        .collect();
    let (claim_s, claim_cpu, replies) = timed(server, &mut admin, claims);

    let acks: Vec<_> = replies
        .iter()
        .map(|replies| {
            let commands = replies
                .iter()
                .map(|reply| {
                    let jobs = claimed(reply);
                    assert_eq!(jobs.len(), 1, "each claim took a job");
                    let mut buf = Vec::new();
                    encode_ack(&mut buf, queue, &jobs[0].0, &jobs[0].1);
                    buf
                })
                .collect();
            send(windows(commands), false)
        })
        .collect();
    let (ack_s, ack_cpu, _) = timed(server, &mut admin, acks);
    check_done(&mut admin, queue, ids.len(), policy, Life::Acks);

    let usec = |admin: &mut support::Connection, name: &str| server_usec(admin, &[name]);
    let (enqueue_us, claim_us, ack_us) = (
        usec(&mut admin, "emq.enqueue"),
        usec(&mut admin, "emq.claim"),
        usec(&mut admin, "emq.ack"),
    );
    let n = ids.len();
    [
        sample(n, enqueue_us, enqueue_cpu, enqueue_s),
        sample(n, claim_us, claim_cpu, claim_s),
        sample(n, ack_us, ack_cpu, ack_s),
        sample(
            n,
            enqueue_us + claim_us + ack_us,
            enqueue_cpu + claim_cpu + ack_cpu,
            enqueue_s + claim_s + ack_s,
        ),
    ]
}
