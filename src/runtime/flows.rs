//! Carrying a finished child to its parents in the child's own call (docs/flows.md): the
//! parents in reach take it at once (`queue::flow::receive`), the others find it in the
//! child queue's outbox, for a worker to deliver. A parent is in reach on a server that is no
//! cluster node, and on a cluster node when its queue has the child's slot.

use std::cell::{Cell, RefCell};

use valkey_module::Context;

use crate::host::acl::Access;
use crate::host::server::log_module;
use crate::host::store::{with_queue, ServerStore};
use crate::host::string::Text;
use crate::protocol::counters::{self, HANDOVERS_LOST};
use crate::protocol::flow::Delivery;
use crate::protocol::{slot, BrandedId, EmqError, Queue, Store};
use crate::queue::flow::{self, Received};
use crate::queue::job::{self, Target};
use crate::queue::Job;

use super::cluster;

/// Deepest chain of parents one call carries hand-overs up (a parent failed by its child
/// fails its own parents, and so on); a deeper one is left in the outbox.
const MAX_DEPTH: usize = 8;

/// Most hand-overs one call gives the parents in reach, however wide the parents above a
/// failing child spread; past them the rest wait in the outbox, for a worker to deliver.
pub const HANDOVER_BUDGET: usize = 1000;

/// Most children one `EMQ.CANCEL` cancels with the job it names, however wide the tree below;
/// the clients' cancel sends the rest their own (docs/flows.md).
pub const CANCEL_BUDGET: usize = 1000;

thread_local! {
    /// The queues whose stores are open in this call, outermost first: a parent's queue
    /// among them (but the innermost) is not opened a second time; its hand-over waits in the
    /// outbox.
    static OPEN: RefCell<Vec<Vec<u8>>> = const { RefCell::new(Vec::new()) };
    /// The hand-overs parents in reach took in this call, against [`HANDOVER_BUDGET`]; back to
    /// 0 once the call's outermost [`Budgeted`] ends.
    static HANDED: Cell<usize> = const { Cell::new(0) };
    /// How many [`Budgeted`] scopes are open.
    static BUDGETED: Cell<usize> = const { Cell::new(0) };
}

/// A span of one call in which the hand-overs parents in reach take count against one
/// [`HANDOVER_BUDGET`]: a call's hand-overs, or a cancel's whole walk of the children. The
/// outermost one's drop (also when a panic unwinds through it) starts the next call at 0.
pub struct Budgeted;

impl Budgeted {
    pub fn enter() -> Self {
        BUDGETED.set(BUDGETED.get() + 1);
        Budgeted
    }
}

impl Drop for Budgeted {
    fn drop(&mut self) {
        let open = BUDGETED.get().saturating_sub(1);
        BUDGETED.set(open);
        if open == 0 {
            HANDED.set(0);
        }
    }
}

/// Whether the module reaches `parent`'s queue from a call on `child`'s.
pub fn in_reach(child: Queue<'_>, parent: Queue<'_>) -> bool {
    !cluster::enabled() || slot(child.as_bytes()) == slot(parent.as_bytes())
}

/// Runs `f` over `queue`'s store unless it is open already further out (or the chain is too
/// deep): `None` then.
fn nested<R>(
    ctx: &Context,
    queue: Queue<'_>,
    f: impl for<'s> FnOnce(&ServerStore<'s, '_>) -> Result<R, EmqError>,
) -> Option<Result<R, EmqError>> {
    let open = OPEN.with_borrow(|open| {
        open.len() >= MAX_DEPTH || open.iter().any(|q| q.as_slice() == queue.as_bytes())
    });
    if open {
        return None;
    }
    let _open = Opened::push(queue);
    Some(
        cluster::check_stable(queue)
            .and_then(|()| with_queue(ctx, queue, Access::ReadWrite, |store| f(store))),
    )
}

/// A queue's place on [`OPEN`], taken off when dropped: also when a panic the host's guard
/// catches unwinds through it, so no stale name is left to park later hand-overs.
struct Opened;

impl Opened {
    fn push(queue: Queue<'_>) -> Self {
        OPEN.with_borrow_mut(|open| open.push(queue.as_bytes().to_vec()));
        Opened
    }
}

impl Drop for Opened {
    fn drop(&mut self) {
        OPEN.with_borrow_mut(|open| open.pop());
    }
}

/// The hand-overs a call's transitions on `store` kept (`host::store::with_queue` calls this
/// when they end): each parent in reach takes its own now, in this call; the rest go to the
/// outbox. Nothing here refuses the call: its transitions are written already.
pub fn hand_over(store: &ServerStore<'_, '_>, deliveries: Vec<Delivery>) {
    let own = store.queue();
    let innermost =
        OPEN.with_borrow(|open| open.last().is_some_and(|q| q.as_slice() == own.as_bytes()));
    let _open = (!innermost).then(|| Opened::push(own));
    let _budget = Budgeted::enter();
    // A parent of this queue that a child fails keeps hand-overs of its own on this same store:
    // they are taken in the next round, as deep as MAX_DEPTH rounds, then parked.
    let mut batch = deliveries;
    let mut round = 0;
    while !batch.is_empty() {
        hand_over_round(store, batch, round < MAX_DEPTH);
        round += 1;
        batch = store.take_deferred();
    }
}

/// One round of [`hand_over`]: with `reach`, each parent in reach takes its hand-over now.
fn hand_over_round(store: &ServerStore<'_, '_>, deliveries: Vec<Delivery>, reach: bool) {
    let ctx = store.ctx();
    let own = store.queue();
    for d in deliveries {
        let reach = reach && HANDED.get() < HANDOVER_BUDGET;
        let reachable = Queue::parse(&d.parent.queue).is_some_and(|p| reach && in_reach(own, p));
        if reachable {
            HANDED.set(HANDED.get() + 1);
        }
        // A hand-over parked before for the same child and parent goes instead: the first
        // outcome counts, and its entry goes once the parent answers.
        let (d, first) = match reachable {
            true => flow::first_parked(store, d),
            false => (d, false),
        };
        let reached = match Queue::parse(&d.parent.queue).filter(|_| reachable) {
            Some(parent) if parent == own => Some(flow::receive(store, &d)),
            Some(parent) => nested(ctx, parent, |p| flow::receive(p, &d)),
            None => None,
        };
        let done = match reached {
            Some(Ok(Received::Counted | Received::Duplicate)) => Ok(()),
            Some(Ok(Received::Orphan)) => flow::mark_orphan(store, &d),
            Some(Err(_)) | None => flow::park(store, &d),
        };
        let done = match (first, &reached) {
            (true, Some(Ok(_))) => done.and_then(|()| flow::unpark(store, &d)),
            _ => done,
        };
        if let Err(e) = done {
            counters::count(&HANDOVERS_LOST, 1);
            log_module(
                c"warning",
                &format!("EchoMQ could not keep a child's hand-over: {}", e.message()),
            );
        }
    }
}

/// What a child's own enqueue answers [`adopting`]: its reply and the child it wrote (`None`:
/// none, a duplicate or a held unique key).
pub type Enqueued<R> = Result<(R, Option<BrandedId>), EmqError>;

/// Runs `enqueue` (a child's own enqueue in `child_queue`) inside the stores of its parents in
/// reach (`queue::flow::adopt_around`): each checked before it, given the first refusal (for
/// it to refuse, after its own duplicate check, with nothing written), and registering the
/// child it wrote after it. The parents out of reach are the client's to register first
/// (`EMQ.ADOPT`).
pub fn adopting<R>(
    ctx: &Context,
    child_queue: Queue<'_>,
    child: Option<&BrandedId>,
    parents: &[(Queue<'_>, BrandedId)],
    refusal: Option<EmqError>,
    enqueue: &mut dyn FnMut(Option<EmqError>) -> Enqueued<R>,
) -> Enqueued<R> {
    let Some(((queue, parent), rest)) = parents.split_first() else {
        return enqueue(refusal);
    };
    if !in_reach(child_queue, *queue) {
        return adopting(ctx, child_queue, child, rest, refusal, enqueue);
    }
    if let Err(e) = cluster::check_stable(*queue) {
        return adopting(ctx, child_queue, child, rest, refusal.or(Some(e)), enqueue);
    }
    with_queue(ctx, *queue, Access::ReadWrite, |p| {
        flow::adopt_around(p, parent, child_queue.as_bytes(), child, |mine| {
            adopting(ctx, child_queue, child, rest, refusal.or(mine), enqueue)
        })
    })
}

/// Cancels the children a cancelled parent left unfinished that have not started, those in
/// reach of `queue`; each cancels its own in turn, as deep as [`MAX_DEPTH`]. The others are
/// left to finish (their hand-overs find no parent).
pub fn cancel_children(ctx: &Context, queue: Queue<'_>, children: Vec<(Vec<u8>, BrandedId)>) {
    let _budget = Budgeted::enter();
    let mut budget = CANCEL_BUDGET;
    cancel_below(ctx, queue, children, 1, &mut budget);
}

/// [`cancel_children`] at `depth`, while `budget` children are left to cancel.
fn cancel_below(
    ctx: &Context,
    queue: Queue<'_>,
    children: Vec<(Vec<u8>, BrandedId)>,
    depth: usize,
    budget: &mut usize,
) {
    if depth > MAX_DEPTH {
        return;
    }
    for (child_queue, child) in children {
        if *budget == 0 {
            return;
        }
        let Some(child_queue) = Queue::parse(&child_queue) else {
            continue;
        };
        if !in_reach(queue, child_queue) {
            continue;
        }
        let cancelled = nested(ctx, child_queue, |store| {
            let member = Text::Owned(crate::host::string::OwnedString::new(
                store.ctx(),
                &child.encode(),
            )?);
            let target = Target::check(
                store,
                Job {
                    id: child,
                    member: &member,
                },
            )?;
            job::cancel_job(store, &target, false)
        });
        if let Some(Ok(Some(grandchildren))) = cancelled {
            *budget -= 1;
            if !grandchildren.is_empty() {
                cancel_below(ctx, child_queue, grandchildren, depth + 1, budget);
            }
        }
    }
}
