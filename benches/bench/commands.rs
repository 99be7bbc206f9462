//! The commands the runs send, pre-encoded, and the replies they read back (claims, pops).

use crate::resp::{bulk, encode, header};
use crate::support::row_key;
use crate::workload::{LIFE_LEASE_MS, PAYLOAD};

/// The native enqueue of job `id`: `HSET` of its row as the reference script writes it, then
/// `ZADD` to `pending`.
pub fn encode_native_enqueue(out: &mut Vec<u8>, queue: &str, pending: &str, id: &str) {
    let row = row_key(queue, id);
    encode(
        out,
        &[
            b"HSET",
            row.as_bytes(),
            b"state",
            b"pending",
            b"attempts",
            b"0",
            b"payload",
            PAYLOAD,
        ],
    );
    encode(out, &[b"ZADD", pending.as_bytes(), b"0", id.as_bytes()]);
}

/// The reference `@enqueue` of job `id`, by `EVALSHA` of the loaded script `sha`.
pub fn encode_lua_enqueue(out: &mut Vec<u8>, sha: &str, queue: &str, pending: &str, id: &str) {
    let row = row_key(queue, id);
    encode(
        out,
        &[
            b"EVALSHA",
            sha.as_bytes(),
            b"2",
            row.as_bytes(),
            pending.as_bytes(),
            id.as_bytes(),
            PAYLOAD,
        ],
    );
}

/// `EMQ.ACK` of job `id` with its claim's `token`.
pub fn encode_ack(out: &mut Vec<u8>, queue: &str, id: &[u8], token: &[u8]) {
    encode(out, &[b"EMQ.ACK", queue.as_bytes(), id, token]);
}

/// `EMQ.CLAIM <queue> COUNT <n> LEASE`, the lease outliving the run.
pub fn encode_claim(out: &mut Vec<u8>, queue: &str, n: usize) {
    let count = n.to_string();
    encode(
        out,
        &[
            b"EMQ.CLAIM",
            queue.as_bytes(),
            b"COUNT",
            count.as_bytes(),
            b"LEASE",
            LIFE_LEASE_MS,
        ],
    );
}

/// `EMQ.MACK` of `jobs` (id and token each), with `CLAIM <n> LEASE` when `claim` is `Some(n)`.
pub fn encode_mack(
    out: &mut Vec<u8>,
    queue: &str,
    jobs: &[(Vec<u8>, Vec<u8>)],
    claim: Option<usize>,
) {
    let mut args: Vec<&[u8]> = vec![b"EMQ.MACK", queue.as_bytes()];
    for (id, token) in jobs {
        args.push(id);
        args.push(token);
    }
    let count = claim.map(|n| n.to_string());
    if let Some(count) = &count {
        args.extend([
            b"CLAIM".as_slice(),
            count.as_bytes(),
            b"LEASE",
            LIFE_LEASE_MS,
        ]);
    }
    encode(out, &args);
}

/// Each job of an `EMQ.CLAIM` reply (RESP2: an array of `[id, payload, attempts]`) as the
/// `id` and `token` of its `EMQ.ACK`: the token is the reply's third element.
pub fn claimed(reply: &[u8]) -> Vec<(Vec<u8>, Vec<u8>)> {
    let mut pos = 0;
    let (kind, jobs) = header(reply, &mut pos);
    assert_eq!(kind, b'*', "a claim replies an array");
    (0..jobs)
        .map(|_| {
            assert_eq!(
                header(reply, &mut pos),
                (b'*', 3),
                "[id, payload, attempts]"
            );
            let id = bulk(reply, &mut pos).to_vec();
            assert_eq!(bulk(reply, &mut pos), PAYLOAD, "the job's payload");
            let (kind, token) = header(reply, &mut pos);
            assert_eq!(kind, b':', "attempts is an integer");
            (id, token.to_string().into_bytes())
        })
        .collect()
}

/// The jobs of an `EMQ.MACK ... CLAIM` reply (`[places, jobs]`), every place `1`.
pub fn claimed_next(reply: &[u8]) -> Vec<(Vec<u8>, Vec<u8>)> {
    let mut pos = 0;
    assert_eq!(header(reply, &mut pos), (b'*', 2), "[places, jobs]");
    let (kind, places) = header(reply, &mut pos);
    assert_eq!(kind, b'*', "the places");
    for _ in 0..places {
        assert_eq!(header(reply, &mut pos), (b':', 1), "each job acknowledged");
    }
    claimed(&reply[pos..])
}

/// The ids of a `ZPOPMIN` reply (RESP2: member, score, member, score, ...).
pub fn popped(reply: &[u8]) -> Vec<Vec<u8>> {
    let mut pos = 0;
    let (kind, n) = header(reply, &mut pos);
    assert_eq!(kind, b'*', "ZPOPMIN replies an array");
    (0..n / 2)
        .map(|_| {
            let id = bulk(reply, &mut pos).to_vec();
            bulk(reply, &mut pos);
            id
        })
        .collect()
}
