//! Repeating jobs (protocol.md §9, `protocol::cron`): `EMQ.CRON` sets a schedule, `EMQ.UNCRON` removes
//! one, `EMQ.CRONS` lists them, and the timer fires the ones that are due, each firing one job
//! with a minted id and the schedule's next firing written in the same step.

use crate::protocol::counters::{self, CRON_FIRED};
use crate::protocol::cron::{Schedule, Spec, MAX_SCHEDULES};
use crate::protocol::{EmqError, Field, KeyRef, Store, Table, Value};

use super::enqueue::{enqueue, Added, Placement};

/// Most schedules one visit of the timer fires; more that are due wait for the next tick.
pub const FIRE_BUDGET: usize = 100;

/// `EMQ.CRON <queue> <name> ...`: sets (or replaces) a schedule, its first firing the next one
/// after now; that firing (unix ms). A replaced schedule keeps its last firing.
pub fn set<S: Store>(
    store: &S,
    name: &[u8],
    spec: Spec,
    payload: &[u8],
    priority: i64,
) -> Result<i64, EmqError> {
    store.check_access(&[KeyRef::Table(Table::Cron)])?;
    // A queue that takes no job (a partitioned queue's own name, a retired partition) keeps
    // no schedule: its firings would be refused. A partition takes a new schedule whose name
    // routes to it, as the clients send them, and refuses another with the width; one it holds
    // already (set there before this rule) may still be replaced.
    let lane = super::span::lane(store)?;
    let old = store.table_get(Table::Cron, name)?;
    if let (Some(lane), None) = (&lane, &old) {
        lane.check(name)?;
    }
    if old.is_none() && store.table_len(Table::Cron)? >= MAX_SCHEDULES {
        return Err(EmqError::Cron(
            format!("the queue holds {MAX_SCHEDULES} schedules, the most it may").into(),
        ));
    }
    let now = store.now_ms();
    let next = spec
        .next_after(now)
        .ok_or(EmqError::Cron("the spec never fires".into()))?;
    let last = old
        .as_ref()
        .and_then(|o| Schedule::parse(store.bytes(o)))
        .and_then(|s| s.last);
    let schedule = Schedule {
        spec,
        payload: payload.to_vec(),
        priority,
        next: Some(next),
        last,
    };
    store.table_set(Table::Cron, name, &schedule.encode())?;
    Ok(next)
}

/// `EMQ.UNCRON <queue> <name>`: whether there was such a schedule.
pub fn remove<S: Store>(store: &S, name: &[u8]) -> Result<bool, EmqError> {
    store.check_access(&[KeyRef::Table(Table::Cron)])?;
    store.table_del(Table::Cron, name)
}

/// Every schedule of the queue (at most [`MAX_SCHEDULES`]), by name; a record EchoMQ did not
/// write is left out.
pub fn list<S: Store>(store: &S) -> Result<Vec<(Vec<u8>, Schedule)>, EmqError> {
    store.check_access(&[KeyRef::Table(Table::Cron)])?;
    let mut all = Vec::new();
    let mut cursor = 0;
    // A scan may return a field twice; the table holds at most MAX_SCHEDULES, so twice as
    // many steps' worth of fields ends it whatever the scan does.
    loop {
        let (next, fields) = store.table_scan(Table::Cron, cursor, MAX_SCHEDULES as usize)?;
        all.extend(
            fields
                .into_iter()
                .filter_map(|(name, record)| Some((name, Schedule::parse(&record)?))),
        );
        if next == 0 || all.len() as u64 > 2 * MAX_SCHEDULES {
            break;
        }
        cursor = next;
    }
    all.sort_by(|a, b| a.0.cmp(&b.0));
    all.dedup_by(|a, b| a.0 == b.0);
    Ok(all)
}

/// The timer's part (a visit): fires every due schedule, at most [`FIRE_BUDGET`]: a job
/// enqueued to `pending` with a minted id, the schedule's payload and priority and its name in
/// the row's `cron` field, and the record's next firing moved past `now` (once, however many
/// firings a server that was down missed) with the one fired as the last. When the next one is
/// due (`None`: no schedule will fire).
pub fn fire<S: Store>(store: &S, now: i64) -> Result<Option<i64>, EmqError> {
    if store.table_len(Table::Cron)? == 0 {
        return Ok(None);
    }
    let schedules = list(store)?;
    let mut fired = 0;
    let mut next_due: Option<i64> = None;
    for (name, mut schedule) in schedules {
        let Some(due) = schedule.next else {
            continue;
        };
        if due > now {
            next_due = Some(next_due.map_or(due, |n| n.min(due)));
            continue;
        }
        if fired >= FIRE_BUDGET {
            next_due = Some(now);
            continue;
        }
        let payload = store.text(&schedule.payload)?;
        if let Added::Minted(id) =
            enqueue(store, None, &payload, Placement::Ready, schedule.priority)?
        {
            let member = store.text(&id.encode())?;
            let row_name = store.row_name(&id, &member)?;
            let row = store.open_row(&row_name)?;
            store.set_fields(&row, &[(Field::Cron, Value::Bytes(&name))])?;
        }
        schedule.last = Some(due);
        schedule.next = schedule.spec.next_since(due, now);
        store.table_set(Table::Cron, &name, &schedule.encode())?;
        if let Some(n) = schedule.next {
            next_due = Some(next_due.map_or(n, |m| m.min(n)));
        }
        fired += 1;
    }
    counters::count(&CRON_FIRED, fired as u64);
    Ok(next_due)
}
