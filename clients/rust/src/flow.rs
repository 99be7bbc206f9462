//! Flows, jobs that wait for other jobs (docs/flows.md; what the clients do, 1 and 4):
//! a parent is enqueued with `CHILDREN n` and waits until `n` children have finished; a child
//! names its parents (`PARENT pq pid ON-FAIL FAIL|IGNORE`), each adopted first by its node
//! (`EMQ.ADOPT`) when its queue's slot is not the child's. [`Flows`] builds trees, chains and
//! batches, minting every missing id before it sends anything, so a retry is the same flow.

use std::time::{Duration, SystemTime};

use redis::aio::ConnectionLike;
use redis::{Cmd, Value};

use std::collections::{HashMap, HashSet};

use crate::error::{Error, Result};
use crate::ids;
use crate::partition::{is_name, name, route};
use crate::queue::{timeout_ms, Enqueue, Queue};
use crate::slot::slot;

/// Most parents one child names.
pub const MAX_PARENTS: usize = 16;

/// Longest name of a group, in bytes (the server's rule, as for a queue's name).
pub const MAX_GROUP_LEN: usize = 128;

/// What a child's death or cancellation does to its parent.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum OnFail {
    /// The parent goes to `dead`, with the child's queue, id and error in its own.
    #[default]
    Fail,
    /// The child just counts as finished.
    Ignore,
}

impl OnFail {
    fn word(self) -> &'static [u8] {
        match self {
            OnFail::Fail => b"FAIL",
            OnFail::Ignore => b"IGNORE",
        }
    }
}

/// A parent a job is enqueued as the child of: its queue and id. A parent in a partitioned
/// queue (docs/cluster.md) is in the partition its group, else its id, routes to: the child's
/// enqueue reads the parent queue's width (`EMQ.WIDTH`, once a [`Queue`] handle, and again when
/// the parent is not found) and names that partition. A grouped parent is found so only when
/// its `group` is given ([`Parent::group`]); or name its partition as its queue.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Parent {
    pub queue: String,
    pub id: String,
    pub on_fail: OnFail,
    /// The parent's group in its queue, if it has one: it routes by it in a partitioned queue.
    pub group: Option<String>,
}

impl Parent {
    pub fn new(queue: impl Into<String>, id: impl Into<String>) -> Parent {
        Parent {
            queue: queue.into(),
            id: id.into(),
            on_fail: OnFail::Fail,
            group: None,
        }
    }

    pub fn on_fail(mut self, on_fail: OnFail) -> Parent {
        self.on_fail = on_fail;
        self
    }

    /// The parent's group ([`Enqueue::group`](crate::Enqueue::group)), by which a parent in a
    /// partitioned queue is found.
    pub fn group(mut self, group: impl Into<String>) -> Parent {
        self.group = Some(group.into());
        self
    }
}

/// Refuses parents the client cannot send as one step: over [`MAX_PARENTS`], or one twice.
pub(crate) fn check(parents: &[Parent]) -> Result<()> {
    if parents.len() > MAX_PARENTS {
        return Err(Error::Flow(format!(
            "{} parents; a job has at most {MAX_PARENTS}",
            parents.len()
        )));
    }
    for (i, p) in parents.iter().enumerate() {
        if parents[..i]
            .iter()
            .any(|q| q.queue == p.queue && q.id == p.id)
        {
            return Err(Error::Flow(format!(
                "parent {} {} named twice",
                p.queue, p.id
            )));
        }
    }
    Ok(())
}

/// The enqueue's flow options: `CHILDREN n`, then `PARENT pq pid ON-FAIL ...` for each parent.
pub(crate) fn options(children: Option<u32>, parents: &[Parent]) -> Vec<Vec<u8>> {
    let mut args = Vec::new();
    if let Some(n) = children {
        args.extend([b"CHILDREN".to_vec(), n.to_string().into_bytes()]);
    }
    for p in parents {
        args.extend([
            b"PARENT".to_vec(),
            p.queue.clone().into_bytes(),
            p.id.clone().into_bytes(),
            b"ON-FAIL".to_vec(),
            p.on_fail.word().to_vec(),
        ]);
    }
    args
}

impl<C: ConnectionLike + Clone + Send + Sync + 'static> Queue<C> {
    /// `parents` named by the queues that hold them: a parent of a partitioned queue by the
    /// partition its group, else its id, routes to. Each parent queue's width is read once a
    /// handle (`EMQ.WIDTH`; a partition's, or a retired one's, is 0: it is named as it is) and
    /// kept, unless `fresh`.
    pub(crate) async fn resolve(&self, parents: &[Parent], fresh: bool) -> Result<Vec<Parent>> {
        let mut resolved = Vec::with_capacity(parents.len());
        for p in parents {
            let kept = match fresh {
                true => None,
                false => self.parent_widths().get(&p.queue).copied(),
            };
            let width = match kept {
                Some(width) => width,
                None => {
                    let width = self.at(p.queue.clone()).width().await?;
                    self.parent_widths().insert(p.queue.clone(), width);
                    width
                }
            };
            let key = p.group.as_deref().unwrap_or(&p.id);
            let queue = match width {
                0 => None,
                w => name(&p.queue, route(w, key), w),
            };
            resolved.push(Parent {
                queue: queue.unwrap_or_else(|| p.queue.clone()),
                ..p.clone()
            });
        }
        Ok(resolved)
    }

    /// `EMQ.ADOPT` on each parent's node whose queue's slot is not this queue's: the module
    /// registers a child with a parent out of its reach only so, before the child exists.
    pub(crate) async fn adopt(&self, parents: &[Parent], child: &str) -> Result<()> {
        let here = slot(&self.name);
        for p in parents.iter().filter(|p| slot(&p.queue) != here) {
            let mut cmd = Cmd::new();
            cmd.arg("EMQ.ADOPT")
                .arg(&p.queue)
                .arg(&p.id)
                .arg(&self.name)
                .arg(child);
            match self.send(&cmd, false).await.reply? {
                // 1: registered now; 0: registered already (a retry).
                Value::Int(_) => {}
                other => return Err(Error::Reply(format!("{other:?}"))),
            }
        }
        Ok(())
    }
}

/// A job of a flow: its queue and payload, its id (minted when `None`), what its death does
/// to its parent, its limit on one attempt (`None`: its queue's), its group (`None`: the
/// default group), and its children, which it waits for.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FlowJob {
    pub queue: String,
    pub payload: Vec<u8>,
    pub id: Option<String>,
    pub on_fail: OnFail,
    pub timeout: Option<Duration>,
    /// The job's group ([`Enqueue::group`]): 1 to [`MAX_GROUP_LEN`] bytes of printable ASCII
    /// without `{` or `}` (a flow with another anywhere is refused before any of it is sent,
    /// [`Error::Argument`]). In a partitioned queue the job goes to the partition its group
    /// routes to, and its children name that partition as their parent's queue.
    pub group: Option<String>,
    /// Ahead of (lower) or behind (higher) the default 0 ([`Enqueue::priority`]).
    pub priority: Option<i64>,
    /// Due after this long ([`Enqueue::delay`]): a parent's counts from its enqueue, and one
    /// released after it is ready at once.
    pub delay: Option<Duration>,
    /// Due at this time ([`Enqueue::at`]; with `delay` too, the flow is refused before any of
    /// it is sent).
    pub at: Option<SystemTime>,
    pub children: Vec<FlowJob>,
}

impl FlowJob {
    pub fn new(queue: impl Into<String>, payload: impl AsRef<[u8]>) -> FlowJob {
        FlowJob {
            queue: queue.into(),
            payload: payload.as_ref().to_vec(),
            ..FlowJob::default()
        }
    }

    pub fn id(mut self, id: impl Into<String>) -> FlowJob {
        self.id = Some(id.into());
        self
    }

    pub fn on_fail(mut self, on_fail: OnFail) -> FlowJob {
        self.on_fail = on_fail;
        self
    }

    /// The job's limit on one attempt ([`Enqueue::timeout`]; a flow with a positive timeout
    /// under half a ms anywhere is refused before any of it is sent).
    pub fn timeout(mut self, timeout: Duration) -> FlowJob {
        self.timeout = Some(timeout);
        self
    }

    /// The job's group ([`Enqueue::group`]; checked before the flow is sent, as the field
    /// says).
    pub fn group(mut self, group: impl Into<String>) -> FlowJob {
        self.group = Some(group.into());
        self
    }

    /// The job's priority ([`FlowJob::priority`]).
    pub fn priority(mut self, priority: i64) -> FlowJob {
        self.priority = Some(priority);
        self
    }

    /// The job's delay ([`FlowJob::delay`]).
    pub fn delay(mut self, delay: Duration) -> FlowJob {
        self.delay = Some(delay);
        self
    }

    /// The job's due time ([`FlowJob::at`]).
    pub fn at(mut self, at: SystemTime) -> FlowJob {
        self.at = Some(at);
        self
    }

    pub fn child(mut self, child: FlowJob) -> FlowJob {
        self.children.push(child);
        self
    }

    /// Mints the id of this job and of every job under it that has none; this job's id.
    pub fn mint_ids(&mut self) -> String {
        for child in &mut self.children {
            child.mint_ids();
        }
        self.id.get_or_insert_with(ids::mint).clone()
    }

    /// Refuses a tree with a timeout the server would refuse (under 1 ms or over
    /// [`MAX_DELAY`]), or a group it would refuse, before any job of it is enqueued: a parent
    /// written without its child would wait for it forever.
    fn check(&self) -> Result<()> {
        if let Some(t) = self.timeout {
            if timeout_ms(t)? == 0 || t > MAX_DELAY {
                return Err(Error::Argument(format!(
                    "a timeout is 1 ms to a year, not {t:?}"
                )));
            }
        }
        check_when(self.priority, self.delay, self.at)?;
        if let Some(group) = self.group.as_deref().filter(|g| !is_name(g, MAX_GROUP_LEN)) {
            return Err(Error::Argument(format!(
                "a group is 1 to {MAX_GROUP_LEN} printable ASCII bytes without braces, \
                 not {group:?}"
            )));
        }
        self.children.iter().try_for_each(FlowJob::check)
    }

    /// Refuses a minted tree that names one job twice: its parent would wait for two children
    /// where the second enqueue is the first's duplicate.
    fn check_distinct<'a>(&'a self, seen: &mut HashSet<(&'a str, &'a str)>) -> Result<()> {
        let id = self.id.as_deref().unwrap_or_default();
        if !seen.insert((&self.queue, id)) {
            return Err(Error::Argument(format!(
                "the job {} {id} appears twice in the tree",
                self.queue
            )));
        }
        self.children
            .iter()
            .try_for_each(|child| child.check_distinct(seen))
    }
}

/// The priorities a job may have (the server's bounds).
pub const PRIORITY_MIN: i64 = -1_000_000;
pub const PRIORITY_MAX: i64 = 1_000_000;
/// The longest delay the server takes: a year.
pub const MAX_DELAY: Duration = Duration::from_secs(365 * 86_400);
/// The latest due time the server takes, in unix ms.
pub const MAX_AT_MS: u64 = (1 << 53) - 1;

/// Refuses ([`Error::Argument`]) what the server would refuse of a flow's job: a priority out
/// of [`PRIORITY_MIN`]..=[`PRIORITY_MAX`], a delay over [`MAX_DELAY`], a time before 1970 or
/// past [`MAX_AT_MS`], or both a delay and a time.
pub(crate) fn check_when(
    priority: Option<i64>,
    delay: Option<Duration>,
    at: Option<SystemTime>,
) -> Result<()> {
    if delay.is_some() && at.is_some() {
        return Err(Error::Argument(
            "give a delay or a time (at), not both".into(),
        ));
    }
    if priority.is_some_and(|p| !(PRIORITY_MIN..=PRIORITY_MAX).contains(&p)) {
        return Err(Error::Argument(format!(
            "a priority is {PRIORITY_MIN} to {PRIORITY_MAX}"
        )));
    }
    if delay.is_some_and(|d| d > MAX_DELAY) {
        return Err(Error::Argument("a delay is at most 365 days".into()));
    }
    if let Some(at) = at {
        if crate::enqueue::unix_ms(at)? > MAX_AT_MS {
            return Err(Error::Argument(format!(
                "a time is at most {MAX_AT_MS} unix ms"
            )));
        }
    }
    Ok(())
}

/// Enqueues flows on a connection (multiplexed, or a cluster's, which routes each call to
/// its queue's node).
///
/// ```no_run
/// # use echomq_client::{FlowJob, Flows, Job, Worker};
/// # async fn example(conn: redis::aio::MultiplexedConnection) -> echomq_client::Result<()> {
/// # let (claims, calls) = (conn.clone(), conn.clone());
/// let flows = Flows::new(conn);
/// let mut report = FlowJob::new("reports", b"march")
///     .child(FlowJob::new("fetch", b"eu"))
///     .child(FlowJob::new("fetch", b"us"));
/// let id = flows.flow(&mut report).await?; // ids minted into `report`: a retry reuses them
///
/// let worker = Worker::new(claims, calls, "reports", |job: Job| async move {
///     let children = job.children().await?; // (queue, id) -> status and result
///     let rows: usize = children.values().map(|c| c.data.len()).sum();
///     Ok(Some(rows.to_string().into_bytes()))
/// });
/// # let _ = (id, worker);
/// # Ok(())
/// # }
/// ```
#[derive(Clone)]
pub struct Flows<C> {
    conn: C,
}

impl<C: ConnectionLike + Clone + Send + Sync + 'static> Flows<C> {
    pub fn new(conn: C) -> Flows<C> {
        Flows { conn }
    }

    /// Mints the tree's missing ids into it, then enqueues it top down: each job with
    /// `CHILDREN` (when it has children), `PARENT` (its parent's, with its `on_fail`) and
    /// `GROUP` (when it has one); the root's id. Every job is checked first (its timeout,
    /// group, priority and times, and that no job is named twice: [`Error::Argument`]), before
    /// any is sent. A call that failed part way is retried
    /// with the same tree: the jobs written already answer as duplicates, and each child is
    /// counted once. A job of a partitioned queue goes to its partition, the one its group, or
    /// else its id, routes to, and its children name that partition as their parent's queue
    /// (as do the keys of its [`Children`](crate::Children)); each queue's width is learned
    /// once a call.
    pub async fn flow(&self, tree: &mut FlowJob) -> Result<String> {
        tree.check()?;
        let root = tree.mint_ids();
        tree.check_distinct(&mut HashSet::new())?;
        // Each queue's handle, and whether its width was read in this call.
        let mut queues: HashMap<String, (Queue<C>, bool)> = HashMap::new();
        let mut todo: Vec<(&FlowJob, Option<Parent>)> = vec![(tree, None)];
        while let Some((job, parent)) = todo.pop() {
            let id = job.id.clone().unwrap_or_else(ids::mint);
            let how = Enqueue {
                id: Some(id.clone()),
                children: (!job.children.is_empty()).then_some(job.children.len() as u32),
                parents: parent.into_iter().collect(),
                timeout: job.timeout,
                group: job.group.clone(),
                priority: job.priority,
                delay: job.delay,
                at: job.at,
                ..Enqueue::default()
            };
            let (queue, read) = queues
                .entry(job.queue.clone())
                .or_insert_with(|| (Queue::new(self.conn.clone(), job.queue.clone()), false));
            // The parent named is where it went: nothing to resolve.
            let (_, went) = queue.enqueue_to(&job.payload, how, read, false).await?;
            // Reversed: the stack hands the first child back first.
            for child in job.children.iter().rev() {
                let parent = Parent::new(went.clone(), id.clone()).on_fail(child.on_fail);
                todo.push((child, Some(parent)));
            }
        }
        Ok(root)
    }

    /// `jobs` run one after another, the first first: each is the parent of the one before
    /// it. Their ids (minted into `jobs` where missing), in order.
    pub async fn chain(&self, jobs: &mut [FlowJob]) -> Result<Vec<String>> {
        let ids: Vec<String> = jobs.iter_mut().map(FlowJob::mint_ids).collect();
        let mut links = jobs.iter().cloned();
        let Some(mut tree) = links.next() else {
            return Ok(ids);
        };
        for mut next in links {
            next.children.push(tree);
            tree = next;
        }
        self.flow(&mut tree).await?;
        Ok(ids)
    }

    /// `on_complete` runs once every job of `jobs` has finished, acknowledged or dead (each
    /// is its child with [`OnFail::Ignore`]); its handler reads them with `Job::children`.
    /// Its id (every missing id minted into `jobs` and `on_complete`).
    pub async fn batch(&self, jobs: &mut [FlowJob], on_complete: &mut FlowJob) -> Result<String> {
        if jobs.is_empty() {
            return Err(Error::Flow("a batch of no jobs".into()));
        }
        for job in jobs.iter_mut() {
            job.mint_ids();
        }
        let id = on_complete.mint_ids();
        let mut tree = on_complete.clone();
        tree.children
            .extend(jobs.iter().cloned().map(|j| j.on_fail(OnFail::Ignore)));
        self.flow(&mut tree).await?;
        Ok(id)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn options_carry_children_and_each_parent_with_its_policy() {
        let parents = [
            Parent::new("reports", "JOB0KHTOWnGLuC"),
            Parent::new("audit", "JOB0KHTOWnGLuD").on_fail(OnFail::Ignore),
        ];
        let words: Vec<String> = options(Some(2), &parents)
            .into_iter()
            .map(|w| String::from_utf8(w).unwrap())
            .collect();
        assert_eq!(
            words.join(" "),
            "CHILDREN 2 PARENT reports JOB0KHTOWnGLuC ON-FAIL FAIL \
             PARENT audit JOB0KHTOWnGLuD ON-FAIL IGNORE"
        );
        assert!(options(None, &[]).is_empty());
    }

    #[test]
    fn a_tree_with_a_timeout_rounding_to_nothing_is_refused_before_sending() {
        let tree = |t: Duration| {
            FlowJob::new("q", b"parent")
                .timeout(Duration::from_secs(1))
                .child(FlowJob::new("q", b"child").child(FlowJob::new("q", b"leaf").timeout(t)))
        };
        assert!(tree(Duration::from_micros(500)).check().is_ok());
        assert!(matches!(
            tree(Duration::from_micros(499)).check(),
            Err(Error::Argument(_))
        ));
    }

    #[test]
    fn a_tree_with_a_group_the_server_refuses_anywhere_is_refused_before_sending() {
        let tree = |g: &str| {
            FlowJob::new("q", b"parent")
                .group("acme")
                .child(FlowJob::new("q", b"child").child(FlowJob::new("q", b"leaf").group(g)))
        };
        let every: String = (0x21u8..=0x7e)
            .filter(|b| !b"{}".contains(b))
            .map(char::from)
            .collect();
        for good in ["x".repeat(128), every] {
            assert!(tree(&good).check().is_ok(), "{good}");
        }
        for bad in [
            "",
            "a{b",
            "b}",
            "a b",
            "tab\there",
            &"x".repeat(129),
            "caf\u{e9}",
        ] {
            assert!(
                matches!(tree(bad).check(), Err(Error::Argument(_))),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn too_many_or_repeated_parents_are_refused_before_sending() {
        let many: Vec<Parent> = (0..=MAX_PARENTS)
            .map(|n| Parent::new("p", format!("JOB0000000000{n:X}")))
            .collect();
        assert!(check(&many[..MAX_PARENTS]).is_ok());
        assert!(matches!(check(&many), Err(Error::Flow(_))));
        let twice = [
            Parent::new("p", "JOB00000000001"),
            Parent::new("p", "JOB00000000001"),
        ];
        assert!(matches!(check(&twice), Err(Error::Flow(_))));
    }

    #[test]
    fn minting_fills_only_the_missing_ids_and_keeps_them() {
        let mut tree = FlowJob::new("r", b"root")
            .child(FlowJob::new("c", b"a").id("JOB00000000001"))
            .child(FlowJob::new("c", b"b").child(FlowJob::new("d", b"leaf")));
        let root = tree.mint_ids();
        assert_eq!(tree.id.as_deref(), Some(root.as_str()));
        assert_eq!(tree.children[0].id.as_deref(), Some("JOB00000000001"));
        let leaf = tree.children[1].children[0].id.clone();
        assert!(leaf.is_some());
        let again = tree.clone();
        assert_eq!(tree.mint_ids(), root);
        assert_eq!(tree, again);
    }
}
