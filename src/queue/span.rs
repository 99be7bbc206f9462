//! Partitioned queues (docs/cluster.md): a queue's place in one, kept in its `meta` hash
//! (`partitions`, `partition-of`, `partition`), `EMQ.SPAN` and `EMQ.UNSPAN` writing it, and the
//! checks an enqueue and a claim make against it. A queue in none reads one `meta` fact.

use crate::protocol::partition::{self, MAX_PARTITIONS};
use crate::protocol::{EmqError, KeyRef, Meta, Store, Table};

use super::stats::stats;

/// What a queue is to partitioning.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Role {
    /// An ordinary queue.
    Plain,
    /// A partitioned queue's own name: it holds no job, and answers an enqueue or a claim
    /// with its width.
    Spanned { width: u16 },
    /// Partition `index` of `of`'s `width`: it takes only the jobs that route to it.
    Partition { of: Vec<u8>, index: u16, width: u16 },
    /// Once a partition of `of` (`EMQ.UNSPAN`): it takes no job, answering a producer that still
    /// routes there with width 0, so it sends to `of` itself and learns its width anew. Its
    /// claims go on; a second `EMQ.UNSPAN` makes it an ordinary queue.
    Retired { of: Vec<u8> },
}

/// Where a new job may go in a partition: only where its group, or else its id, routes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Lane {
    pub index: u16,
    pub width: u16,
}

impl Lane {
    /// Whether a job routed by `key` (its group's name, or else its id) belongs here.
    pub fn takes(&self, key: &[u8]) -> bool {
        partition::route(self.width, key) == self.index
    }

    /// `Ok` when `key` routes here, else the width, for the client to route again.
    pub fn check(&self, key: &[u8]) -> Result<(), EmqError> {
        match self.takes(key) {
            true => Ok(()),
            false => Err(EmqError::Spanned { width: self.width }),
        }
    }

    /// Most ids minted for one job until one routes here (each does with odds 1/width).
    pub fn mint_tries(&self) -> usize {
        64 * usize::from(self.width)
    }
}

fn width_of(bytes: &[u8]) -> Option<u16> {
    std::str::from_utf8(bytes)
        .ok()?
        .parse::<u16>()
        .ok()
        .filter(|w| (1..=MAX_PARTITIONS).contains(w))
}

/// The queue's role, from its `meta` hash (facts that do not parse read as none: a hand-made
/// hash never makes a queue refuse its jobs).
pub fn role<S: Store>(store: &S) -> Result<Role, EmqError> {
    let Some(width) = store.meta(Meta::Partitions)?.as_deref().and_then(width_of) else {
        return Ok(match store.meta(Meta::PartitionOf)? {
            Some(of) => Role::Retired { of },
            None => Role::Plain,
        });
    };
    let Some(of) = store.meta(Meta::PartitionOf)? else {
        return Ok(Role::Spanned { width });
    };
    let index = store
        .meta(Meta::Partition)?
        .as_deref()
        .and_then(|b| std::str::from_utf8(b).ok()?.parse::<u16>().ok())
        .filter(|i| *i < width);
    Ok(match index {
        Some(index) => Role::Partition { of, index, width },
        None => Role::Plain,
    })
}

/// Where a new job may go: anywhere (`None`), or only where a [`Lane`] routes; a partitioned
/// queue's own name takes none.
pub fn lane<S: Store>(store: &S) -> Result<Option<Lane>, EmqError> {
    let role = role(store)?;
    if role != Role::Plain {
        // Only a user who may read the queue learns its place.
        store.check_access(&[KeyRef::ReadMeta])?;
    }
    match role {
        Role::Plain => Ok(None),
        Role::Spanned { width } => Err(EmqError::Spanned { width }),
        Role::Partition { index, width, .. } => Ok(Some(Lane { index, width })),
        Role::Retired { .. } => Err(EmqError::Spanned { width: 0 }),
    }
}

/// A claim of a partitioned queue's own name is refused with its width (a worker that does
/// not know the queue is partitioned learns it here, rather than wait on a queue that never
/// fills).
pub fn check_claim<S: Store>(store: &S) -> Result<(), EmqError> {
    match role(store)? {
        Role::Spanned { width } => {
            store.check_access(&[KeyRef::ReadMeta])?;
            Err(EmqError::Spanned { width })
        }
        _ => Ok(()),
    }
}

/// What `EMQ.SPAN` makes a queue: a partitioned queue's own name, or one of its partitions.
pub enum Span<'a> {
    Spanned {
        width: u16,
    },
    Partition {
        of: &'a [u8],
        index: u16,
        width: u16,
    },
}

/// `EMQ.SPAN`: records the queue's role; `false` when it had that role already. Refused with
/// `EMQSPAN` when it has another, or holds jobs (a queue becomes a partitioned one, or a
/// partition, empty: no job is ever left where no route leads).
pub fn span<S: Store>(store: &S, to: &Span<'_>) -> Result<bool, EmqError> {
    store.check_access(&[KeyRef::Meta])?;
    let now = role(store)?;
    let wanted = match to {
        Span::Spanned { width } => Role::Spanned { width: *width },
        Span::Partition { of, index, width } => Role::Partition {
            of: of.to_vec(),
            index: *index,
            width: *width,
        },
    };
    if now == wanted {
        return Ok(false);
    }
    // A retired partition may become a partition again, of any width (its name may be one).
    if !matches!(now, Role::Plain | Role::Retired { .. }) {
        return Err(EmqError::Span(describe(&now).into()));
    }
    if holds_jobs(store)? {
        return Err(EmqError::Span(
            "the queue holds jobs; span an empty queue (drain or purge it first)".into(),
        ));
    }
    if matches!(to, Span::Spanned { .. }) && holds_schedules(store)? {
        return Err(EmqError::Span(
            "the queue holds repeating schedules; EMQ.UNCRON them first (set them on its partitions)"
                .into(),
        ));
    }
    match to {
        Span::Spanned { width } => {
            store.del_meta(Meta::PartitionOf)?;
            store.set_meta(Meta::Partitions, width.to_string().as_bytes())
        }
        Span::Partition { of, index, width } => {
            store.set_meta(Meta::PartitionOf, of)?;
            store.set_meta(Meta::Partition, index.to_string().as_bytes())?;
            store.set_meta(Meta::Partitions, width.to_string().as_bytes())
        }
    }?;
    Ok(true)
}

/// `EMQ.UNSPAN`: a partitioned queue's own name, or a retired partition, is an ordinary queue
/// again, and a partition is retired; `false` for an ordinary queue. A partition that holds
/// jobs is refused (`EMQSPAN`): they would be left where no route leads.
pub fn unspan<S: Store>(store: &S) -> Result<bool, EmqError> {
    store.check_access(&[KeyRef::Meta])?;
    match role(store)? {
        Role::Plain => return Ok(false),
        Role::Partition { .. } if holds_jobs(store)? => {
            return Err(EmqError::Span(
                "the partition holds jobs; drain or purge it first".into(),
            ))
        }
        Role::Partition { .. } if holds_schedules(store)? => {
            return Err(EmqError::Span(
                "the partition holds repeating schedules; EMQ.UNCRON them first".into(),
            ))
        }
        Role::Partition { .. } => {
            store.del_meta(Meta::Partitions)?;
            store.del_meta(Meta::Partition)?;
        }
        Role::Spanned { .. } => {
            store.del_meta(Meta::Partitions)?;
        }
        Role::Retired { .. } => {
            store.del_meta(Meta::PartitionOf)?;
        }
    }
    Ok(true)
}

/// Why a queue with role `now` cannot take another.
fn describe(now: &Role) -> String {
    match now {
        Role::Plain => "the queue is an ordinary queue".into(),
        Role::Spanned { width } => format!(
            "the queue is spanned over {width} partitions; EMQ.UNSPAN it first to change that"
        ),
        Role::Partition { of, index, width } => format!(
            "the queue is partition {index} of {width} of {}; EMQ.UNSPAN it first to change that",
            String::from_utf8_lossy(of)
        ),
        Role::Retired { of } => format!(
            "the queue is a retired partition of {}",
            String::from_utf8_lossy(of)
        ),
    }
}

/// Whether the queue keeps repeating schedules (`EMQ.CRON`).
fn holds_schedules<S: Store>(store: &S) -> Result<bool, EmqError> {
    store.check_access(&[KeyRef::Table(Table::Cron)])?;
    Ok(store.table_len(Table::Cron)? > 0)
}

/// Whether the queue holds any job: ready, active, scheduled, dead or a waiting parent.
fn holds_jobs<S: Store>(store: &S) -> Result<bool, EmqError> {
    let held = stats(store)?;
    Ok(held.sets.iter().any(|n| *n > 0) || held.waiting > 0)
}
