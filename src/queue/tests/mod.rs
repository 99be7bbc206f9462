//! Every transition over the in-memory store: what it writes, in which order, and that a
//! refusal writes nothing. One file a family of transitions; the helpers they share are here.

mod flow;
mod lifecycle;
mod limits;
mod operate;
mod priority;
mod repeating;
mod timeouts;
mod unique;

use super::claim::{claim, ORPHAN_BUDGET};
use super::enqueue::{check_new, enqueue, enqueue_many, Added, BatchJob, Placement};
use super::job::{cancel, requeue, Target};
use super::lease::{ack, fail, renew, Failed};
use super::memory::{MemKey, Memory};
use super::promote::{next_due, visit};
use super::stats::stats;
use super::Job;
use crate::protocol::{settings, BrandedId, EmqError, Set};

const NOW: i64 = 1_800_000_000_000;

fn id(n: u64) -> (BrandedId, Vec<u8>) {
    let id = BrandedId::new(*b"JOB", n).expect("a valid id");
    (id, id.encode().to_vec())
}

fn name(n: u64) -> String {
    String::from_utf8(id(n).1).expect("ascii")
}

/// One job of a batch: `job` by its id, or one to mint (`None`), with `payload` at `priority`.
fn batch_job<'j>(
    job: Option<&'j (BrandedId, Vec<u8>)>,
    payload: &'j Vec<u8>,
    priority: i64,
) -> BatchJob<'j, Memory> {
    BatchJob {
        job: job.map(|(id, member)| Job { id: *id, member }),
        payload,
        priority,
        headers: None,
    }
}

/// Enqueues job `n` with `payload`, now.
fn put(m: &Memory, n: u64, payload: &str) -> Added {
    let (id, member) = id(n);
    enqueue(
        m,
        Some(Job {
            id,
            member: &member,
        }),
        &payload.as_bytes().to_vec(),
        Placement::Ready,
        0,
    )
    .expect("enqueued")
}

fn target<'j>(m: &Memory, n: u64, member: &'j Vec<u8>) -> Result<Target<'j, Memory>, EmqError> {
    Target::check(
        m,
        Job {
            id: id(n).0,
            member,
        },
    )
}

fn writes(m: &Memory) -> Vec<String> {
    std::mem::take(&mut *m.writes.borrow_mut())
}
