//! Flows (docs/flows.md): a parent waits in `waiting` until its children finish. The parent's
//! side (registering a child, counting a finished one, releasing or failing the parent) and the
//! child's (keeping its hand-overs, the outbox) are each one store's transitions; carrying a
//! hand-over from one to the other is `runtime::flows`' (in one call) or a worker's (through
//! the outbox).

use crate::protocol::counters::{self, DEAD, HANDED_OVER, ORPHANED, PARKED, RELEASED};
use crate::protocol::flow::{
    child_field, child_value, failed_by, read_child_field, read_child_value, Delivery, Outcome,
    Policy,
};
use crate::protocol::{
    BrandedId, EmqError, Event, Field, Holds, KeyRef, Set, State, Store, Table, Value,
};

use super::finished::{self, bury};
use super::{count_of, priority, ready, record, set_state};

/// A parent named by its id: its set member and its row's name.
struct Parent<S: Store> {
    member: S::Text,
    row: S::Name,
}

impl<S: Store> Parent<S> {
    fn name(store: &S, id: &BrandedId) -> Result<Self, EmqError> {
        let member = store.text(&id.encode())?;
        let row = store.row_name(id, &member)?;
        Ok(Self { member, row })
    }
}

/// The parent's refusals, naming it.
fn refused(store: &impl Store, id: &BrandedId, why: &str) -> EmqError {
    let queue = String::from_utf8_lossy(store.queue_name());
    let id = String::from_utf8_lossy(&id.encode()).into_owned();
    EmqError::Parent(format!("parent {queue} {id} {why}").into())
}

/// Checks child `child` (`None`: one whose id is not minted yet) with the waiting parent
/// `parent` of this queue, then runs `enqueue` (the child's own enqueue, given this parent's
/// refusal if any: nothing may be written then), then registers the child it answers
/// (`Some`), in one pass over the parent's row: one open, one read of its counters, one
/// write. Refused (`EMQPARENT`) when the parent does not exist, is not waiting, or has
/// registered all its children. A child registered before stays registered, whatever became
/// of the parent since: a retried flow finds it so, and nothing is written.
pub fn adopt_around<S: Store, R>(
    store: &S,
    parent: &BrandedId,
    child_queue: &[u8],
    child: Option<&BrandedId>,
    enqueue: impl FnOnce(Option<EmqError>) -> Result<(R, Option<BrandedId>), EmqError>,
) -> Result<(R, Option<BrandedId>), EmqError> {
    let p = match Parent::name(store, parent) {
        Ok(p) => p,
        Err(e) => return enqueue(Some(e)),
    };
    let row = match store
        .check_access(&[KeyRef::Row(&p.row)])
        .and_then(|()| store.open_row(&p.row))
    {
        Ok(row) => row,
        Err(e) => return enqueue(Some(e)),
    };
    // The child's field, named once for the check and the write (a minted child's after).
    let field = match child.map(|c| store.text(&child_field(child_queue, c))) {
        Some(Err(e)) => return enqueue(Some(e)),
        field => field.and_then(Result::ok),
    };
    let adopted = match adoption(store, &row, parent, field.as_ref()) {
        Ok(Some(adopted)) => adopted,
        Ok(None) => return enqueue(None),
        Err(e) => return enqueue(Some(e)),
    };
    let (out, added) = enqueue(None)?;
    if let Some(child) = &added {
        let field = match field {
            Some(field) => field,
            None => store.text(&child_field(child_queue, child))?,
        };
        register(store, &row, &field, adopted)?;
    }
    Ok((out, added))
}

/// Writes a child's registration: its field, waiting, and the parent's `adopted` count.
fn register<S: Store>(
    store: &S,
    row: &S::Row<'_>,
    field: &S::Text,
    adopted: i64,
) -> Result<(), EmqError> {
    store.set_named(
        row,
        (field, Outcome::Waiting.as_bytes()),
        &[(Field::Adopted, Value::Int(adopted + 1))],
    )
}

/// [`adopt_around`]'s check: the parent's `adopted` count while it has room for a child,
/// `None` for a child it registered before.
fn adoption<S: Store>(
    store: &S,
    row: &S::Row<'_>,
    parent: &BrandedId,
    child: Option<&S::Text>,
) -> Result<Option<i64>, EmqError> {
    match store.holds(row) {
        Holds::Hash => {}
        Holds::Nothing => return Err(refused(store, parent, "does not exist")),
        _ => return Err(EmqError::WrongType),
    }
    let counters = [Field::State, Field::Adopted, Field::Children];
    let (before, [state, adopted, children]) = match child {
        Some(field) => store.row_get_with3(row, field, counters),
        None => (None, store.fields3(row, counters)),
    };
    if before.is_some() {
        return Ok(None);
    }
    if state.as_ref().map(|s| store.bytes(s)) != Some(State::Waiting.as_bytes()) {
        return Err(refused(store, parent, "is not waiting for children"));
    }
    let (adopted, children) = (count_of(store, adopted), count_of(store, children));
    if adopted >= children {
        return Err(refused(
            store,
            parent,
            &format!("has all its {children} children"),
        ));
    }
    Ok(Some(adopted))
}

/// `EMQ.ADOPT`: registers child `child` of `child_queue` with the waiting parent `parent`, as
/// [`adopt_around`] does with nothing to enqueue: `true` when it registers now, `false` when
/// it was registered before.
pub fn adopt<S: Store>(
    store: &S,
    parent: &BrandedId,
    child_queue: &[u8],
    child: &BrandedId,
) -> Result<bool, EmqError> {
    let p = Parent::name(store, parent)?;
    store.check_access(&[KeyRef::Row(&p.row)])?;
    let row = store.open_row(&p.row)?;
    let field = store.text(&child_field(child_queue, child))?;
    match adoption(store, &row, parent, Some(&field))? {
        Some(adopted) => register(store, &row, &field, adopted).map(|()| true),
        None => Ok(false),
    }
}

/// What a parent made of a hand-over.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Received {
    /// Counted now.
    Counted,
    /// Counted before: a hand-over delivered again.
    Duplicate,
    /// Refused: the parent is gone, or neither waits for the child nor has room for it.
    Orphan,
}

impl Received {
    pub fn as_str(self) -> &'static str {
        match self {
            Received::Counted => "counted",
            Received::Duplicate => "duplicate",
            Received::Orphan => "orphan",
        }
    }
}

/// The parent's side of a hand-over (`EMQ.HANDOVER`, or in the child's own call): a child the
/// parent registered counts once, by its id (the first outcome counts); one it never
/// registered is an orphan. The last child releases a waiting parent to `pending` (or
/// `schedule`, while its due time is ahead); a dead or cancelled one whose policy is `fail`
/// buries it, naming the child. Only the child that moves the parent touches more than its row
/// (and reads its state): the others check, read (in one call) and write the row alone.
pub fn receive<S: Store>(store: &S, d: &Delivery) -> Result<Received, EmqError> {
    let p = Parent::name(store, &d.parent.id)?;
    store.check_access(&[KeyRef::Row(&p.row)])?;
    let row = store.open_row(&p.row)?;
    if store.holds(&row) != Holds::Hash {
        counters::count(&ORPHANED, 1);
        return Ok(Received::Orphan);
    }
    let field = store.text(&child_field(&d.child_queue, &d.child))?;
    let (before, [children, finished]) =
        store.row_get_with2(&row, &field, [Field::Children, Field::Finished]);
    match before {
        None => {
            counters::count(&ORPHANED, 1);
            return Ok(Received::Orphan);
        }
        Some(v) if read_child_value(store.bytes(&v)).0 != Outcome::Waiting => {
            // Written again as it is: the reply then follows the count in the replication
            // stream, so a `WAIT` after it on any connection confirms the count, which another
            // connection made and its replicas may not have yet (a worker that removes the
            // entry once they confirm it would otherwise lose a count a failover undoes).
            let value = store.bytes(&v).to_vec();
            store.set_named(&row, (&field, &value), &[])?;
            return Ok(Received::Duplicate);
        }
        Some(_) => {}
    }
    let finished = count_of(store, finished) + 1;
    let fails = d.outcome.failed() && d.parent.policy == Policy::Fail;
    // The parent's state is read only for the child that may move it.
    let moves = (fails || finished >= count_of(store, children))
        && store
            .field(&row, Field::State)
            .as_ref()
            .map(|s| store.bytes(s))
            == Some(State::Waiting.as_bytes());
    // The move's keys, checked before the first write.
    let moves = moves && {
        store.check_access(&[
            KeyRef::Set(Set::Waiting),
            KeyRef::Set(Set::Pending),
            KeyRef::Set(Set::Schedule),
            KeyRef::Set(Set::Dead),
        ])?;
        store.open_sets(&[Set::Waiting, Set::Pending, Set::Schedule, Set::Dead])?;
        store.events()?;
        store.score(Set::Waiting, &p.member).is_some()
    };
    // A parent the child fails hands over to its own parents.
    let grandparents = match moves && fails {
        true => finished::parents(store, &row)?,
        false => None,
    };
    store.set_named(
        &row,
        (&field, &child_value(d.outcome, &d.data)),
        &[(Field::Finished, Value::Int(finished))],
    )?;
    counters::count(&HANDED_OVER, 1);
    if moves && fails {
        let error = failed_by(&d.child_queue, &d.child, d.outcome, &d.data);
        bury(
            store,
            Set::Waiting,
            &p.member,
            &row,
            store.now_ms(),
            Some(&error),
            grandparents.as_ref(),
        )?;
        counters::count(&DEAD, 1);
    } else if moves {
        release(store, &p.member, &row)?;
    }
    Ok(Received::Counted)
}

/// Moves a parent whose children finished from `waiting` to `pending` at its priority, or to
/// `schedule` while its due time (its `waiting` score) is ahead.
fn release<S: Store>(store: &S, member: &S::Text, row: &S::Row<'_>) -> Result<(), EmqError> {
    let due = store.score(Set::Waiting, member).unwrap_or(0.0) as i64;
    let later = due > store.now_ms();
    // Its group's keys are checked before the first write.
    let group = match later {
        true => None,
        false => ready::checked_group(store, row)?,
    };
    store.remove(Set::Waiting, member)?;
    if later {
        set_state(store, row, State::Scheduled, None)?;
        store.add(Set::Schedule, due, member)?;
    } else {
        super::timing::set_pending(store, row)?;
        ready::add(store, group.as_ref(), priority(store, row), member)?;
    }
    record(store, Event::Released, Some(member), || 0)?;
    counters::count(&RELEASED, 1);
    Ok(())
}

/// Where a requeued dead job goes (`EMQ.REQUEUE`): a parent whose children have not all
/// finished back to `waiting`, for the last of them to release it as ever; any other job, a
/// parent whose children all finished included, to `pending`, its handler seeing each child's
/// outcome (the one that failed it too).
pub fn requeued_to<S: Store>(store: &S, row: &S::Row<'_>) -> Set {
    let Some(children) = store.field(row, Field::Children) else {
        return Set::Pending;
    };
    let finished = count_of(store, store.field(row, Field::Finished));
    if finished < count_of(store, Some(children)) {
        Set::Waiting
    } else {
        Set::Pending
    }
}

/// Keeps a hand-over its parent could not take in this call in the child queue's outbox, for a
/// worker to deliver (`EMQ.OUTBOX`). The outbox is the queue's own bookkeeping of a transition
/// the caller was let make: it is written without a permission check of its own. An entry
/// there already stays: the first outcome counts, as on the parent's side (a dead child
/// requeued and finished again before its first hand-over was delivered).
pub fn park<S: Store>(store: &S, d: &Delivery) -> Result<(), EmqError> {
    let field = d.outbox_field();
    if store.table_get(Table::Outbox, &field)?.is_some() {
        return Ok(());
    }
    store.table_set(Table::Outbox, &field, &d.outbox_value())?;
    counters::count(&PARKED, 1);
    Ok(())
}

/// The hand-over a parent in reach takes in the child's own call instead of `d`: the one
/// the outbox keeps for the same child and parent (`true`), parked by an earlier call (its
/// first outcome), else `d`. On the common path, one look at the outbox key: empty, `d`.
pub fn first_parked<S: Store>(store: &S, d: Delivery) -> (Delivery, bool) {
    if !matches!(store.table_len(Table::Outbox), Ok(n) if n > 0) {
        return (d, false);
    }
    let field = d.outbox_field();
    let parked = match store.table_get(Table::Outbox, &field) {
        Ok(Some(value)) => Delivery::from_outbox(store.queue_name(), &field, store.bytes(&value)),
        _ => None,
    };
    match parked {
        Some(first) => (first, true),
        None => (d, false),
    }
}

/// Removes the outbox entry of a parked hand-over its parent answered in the child's call.
pub fn unpark<S: Store>(store: &S, d: &Delivery) -> Result<(), EmqError> {
    store
        .table_del(Table::Outbox, &d.outbox_field())
        .map(|_| ())
}

/// Notes in the child's row (while it has one) that a parent refused it.
pub fn mark_orphan<S: Store>(store: &S, d: &Delivery) -> Result<(), EmqError> {
    let member = store.text(&d.child.encode())?;
    let name = store.row_name(&d.child, &member)?;
    let row = store.open_row(&name)?;
    if store.holds(&row) != Holds::Hash {
        return Ok(());
    }
    let mut line = d.parent.queue.clone();
    line.push(b' ');
    line.extend_from_slice(&d.parent.id.encode());
    let value = match store.field(&row, Field::Orphan) {
        Some(before) => [store.bytes(&before), b"\n", &line].concat(),
        None => line,
    };
    store.set_fields(&row, &[(Field::Orphan, Value::Bytes(&value))])
}

/// A page of the queue's outbox (`EMQ.OUTBOX`): the next cursor (`0` at the end) and the
/// hand-overs; an entry outside the form (written by hand) is skipped.
pub fn outbox_page<S: Store>(
    store: &S,
    cursor: u64,
    count: usize,
) -> Result<(u64, Vec<Delivery>), EmqError> {
    store.check_access(&[KeyRef::Table(Table::Outbox)])?;
    let (next, entries) = store.table_scan(Table::Outbox, cursor, count)?;
    let queue = store.queue_name();
    Ok((
        next,
        entries
            .iter()
            .filter_map(|(f, v)| Delivery::from_outbox(queue, f, v))
            .collect(),
    ))
}

/// `EMQ.DELIVERED`: the outbox entry of a hand-over its parent answered, removed; with
/// `orphan`, the child's row notes the refusal. Whether the entry was there.
pub fn delivered<S: Store>(store: &S, d: &Delivery, orphan: bool) -> Result<bool, EmqError> {
    let member = store.text(&d.child.encode())?;
    let name = store.row_name(&d.child, &member)?;
    store.check_access(&[KeyRef::Table(Table::Outbox), KeyRef::Row(&name)])?;
    let there = store.table_del(Table::Outbox, &d.outbox_field())?;
    if there && orphan {
        // Counted by the parent's side, which refused it (`receive`).
        mark_orphan(store, d)?;
    }
    Ok(there)
}

/// One child of a parent, as `EMQ.CHILDREN` lists it.
pub struct Child {
    pub queue: Vec<u8>,
    pub id: BrandedId,
    pub outcome: Outcome,
    pub data: Vec<u8>,
}

/// A page of a parent's children (`EMQ.CHILDREN`): the next cursor (`0` at the end) and the
/// children the page's fields name. A job that is not a hash has none.
pub fn children_page<S: Store>(
    store: &S,
    id: &BrandedId,
    cursor: u64,
    count: usize,
) -> Result<(u64, Vec<Child>), EmqError> {
    let p = Parent::name(store, id)?;
    store.check_access(&[KeyRef::Row(&p.row)])?;
    if store.probe(&p.row)? != Holds::Hash {
        return Ok((0, Vec::new()));
    }
    let (next, fields) = store.row_scan(&p.row, cursor, count)?;
    let children = fields
        .iter()
        .filter_map(|(f, v)| {
            let (queue, id) = read_child_field(f)?;
            let (outcome, data) = read_child_value(v);
            Some(Child {
                queue: queue.as_bytes().to_vec(),
                id,
                outcome,
                data: data.to_vec(),
            })
        })
        .collect();
    Ok((next, children))
}

/// Most fields of a cancelled parent's row [`unfinished_children`] reads (about: a scan step
/// may return a few more), however many of its children have finished.
pub const MAX_SCANNED_FIELDS: usize = 10_000;

/// The children a cancelled parent leaves that have not finished, at most `limit`, from its
/// row (read before the row goes), among its first [`MAX_SCANNED_FIELDS`] fields.
pub fn unfinished_children<S: Store>(
    store: &S,
    row: &S::Name,
    limit: usize,
) -> Result<Vec<(Vec<u8>, BrandedId)>, EmqError> {
    let mut out = Vec::new();
    let mut cursor = 0;
    let mut scanned = 0;
    loop {
        let (next, fields) = store.row_scan(row, cursor, 256)?;
        scanned += fields.len();
        for (f, v) in &fields {
            if let Some((queue, id)) = read_child_field(f) {
                if read_child_value(v).0 == Outcome::Waiting && out.len() < limit {
                    out.push((queue.as_bytes().to_vec(), id));
                }
            }
        }
        if next == 0 || out.len() >= limit || scanned >= MAX_SCANNED_FIELDS {
            return Ok(out);
        }
        cursor = next;
    }
}
