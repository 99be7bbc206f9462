//! What a transition may read and write of one queue (protocol.md §1): its four sets and its job
//! rows. The host implements [`Store`] over the server's keys, each write with the keyspace
//! event and the replicated effect its native command would have; the queue layer's tests
//! implement it over memory. A transition checks names, permissions and types through it
//! before its first write (validate, then mutate).

use super::branded_id::BrandedId;
use super::error::EmqError;
use super::flow::Delivery;
use super::job::{Field, State};
use super::keyspace::KeyType;

/// Most fields a new row holds past the reference three, its priority and its unique key: a
/// parent's three counters, `parents`, `timeout`, `group` and `headers`.
pub const MORE_FIELDS: usize = 7;

/// A queue's sets (protocol.md §1).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Set {
    /// Ready jobs, score 0, so byte order is mint order.
    Pending,
    /// Claimed jobs, scored by their lease deadline.
    Active,
    /// Delayed jobs, scored by their due time.
    Schedule,
    /// Jobs that spent their attempts, scored by their time of death.
    Dead,
    /// Not a set of jobs: the claims in the rate limit's window, `<id>:<attempt>` scored by the
    /// time of the claim (`protocol::limits`).
    Rate,
    /// Parents waiting for their children, scored by their due time (0: none). Outside
    /// [`Set::ALL`], so the transitions of jobs that are no parents never open it.
    Waiting,
    /// Not a set of jobs: the named groups with ready jobs, in the order of their turns
    /// (`queue::ready`), scored by turn number.
    Turns,
    /// Not a set of jobs: groups with ready jobs held back by their concurrency limit
    /// (`queue::quota`), scored by when they were held.
    Held,
    /// Not a set of jobs: the paused groups (`queue::pauses`), scored by when each resumes.
    Pauses,
    /// Not a set of jobs: the named groups the queue knows (`queue::ready`), scored by minus
    /// their ready jobs.
    Groups,
    /// Not a set of jobs: the claims in the groups' rate windows (`queue::quota`), scored by
    /// when each leaves its window.
    Windows,
}

impl Set {
    /// The sets of jobs, in the order `EMQ.STATS` reports them.
    pub const ALL: [Set; 4] = [Set::Pending, Set::Active, Set::Schedule, Set::Dead];
    /// How many sets a store opens, the rate window, the waiting parents and the groups'
    /// sets included.
    pub const COUNT: usize = 11;

    pub fn key_type(self) -> KeyType {
        match self {
            Set::Pending => KeyType::Pending,
            Set::Active => KeyType::Active,
            Set::Schedule => KeyType::Schedule,
            Set::Dead => KeyType::Dead,
            Set::Rate => KeyType::Rate,
            Set::Waiting => KeyType::Waiting,
            Set::Turns => KeyType::Turns,
            Set::Held => KeyType::Held,
            Set::Pauses => KeyType::Pauses,
            Set::Groups => KeyType::Groups,
            Set::Windows => KeyType::Windows,
        }
    }

    /// The set's place in [`Set::ALL`] (the rate window's and the waiting parents' come
    /// after).
    pub fn index(self) -> usize {
        self as usize
    }
}

/// A hash of the queue beside its sets and rows, field -> value (protocol.md §9).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Table {
    /// `unique`: a unique key -> the job holding it (`<id>`, until that job is done or dead)
    /// or `<id>:<until>`, for a window ending at `until` (unix ms).
    Unique,
    /// `cron`: a schedule's name -> its spec, payload and next firing.
    Cron,
    /// `outbox`: finished children's hand-overs to parents out of reach,
    /// `<child-id>:<parent-id>:<parent-queue>` -> `<outcome>:<policy>:<data>`.
    Outbox,
    /// `tally`: counts kept beside the sets, `pending` the ready jobs of the named groups and
    /// `active:<g>` each group's active jobs.
    Tally,
    /// `quotas`: limits of single groups, `concurrency:<g>`.
    Quotas,
}

impl Table {
    /// How many tables a queue has.
    pub const COUNT: usize = 5;

    pub fn key_type(self) -> KeyType {
        match self {
            Table::Unique => KeyType::Unique,
            Table::Cron => KeyType::Cron,
            Table::Outbox => KeyType::Outbox,
            Table::Tally => KeyType::Tally,
            Table::Quotas => KeyType::Quotas,
        }
    }
}

/// What a removal from a group did: whether each member was there, and how many are left.
pub type Removed = (Vec<bool>, u64);

/// One step of a table's scan: the next cursor (0 at the end), and fields with their values.
pub type ScanStep = (u64, Vec<(Vec<u8>, Vec<u8>)>);

/// What a key holds, as far as EchoMQ cares.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Holds {
    Nothing,
    Hash,
    Zset,
    Stream,
    Other,
}

/// A key whose permission a transition checks: one of the queue's sets, its `meta` hash (read
/// by every transition, for the paused flag and the event stream's setting; written only by the
/// commands that set those), its `events` stream, or a job's row.
pub enum KeyRef<'a, N> {
    Set(Set),
    /// The `meta` hash, read only.
    ReadMeta,
    /// The `meta` hash, to be written.
    Meta,
    Events,
    Table(Table),
    Row(&'a N),
    /// A named group's ready jobs (`group:<g>`).
    Group(&'a [u8]),
}

/// A fact of the queue's `meta` hash (protocol.md §9), by its field.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Meta {
    /// `1` while the queue is paused (`EMQ.PAUSE`): no claim takes a job.
    Paused,
    /// The event stream's cap while it is on (`EMQ.EVENTS ... ON`).
    Events,
    /// How many jobs may be active at once (`EMQ.LIMIT ... CONCURRENCY`).
    Concurrency,
    /// How many claims one rate window may hold (`EMQ.LIMIT ... RATE`).
    Rate,
    /// The rate window's length in ms (`EMQ.LIMIT ... PER`).
    RatePer,
    /// The limit on one attempt of a job without its own, in ms (`EMQ.LIMIT ... TIMEOUT`).
    Timeout,
    /// `1` once a job of the queue may carry a deadline (a `TIMEOUT` given at enqueue or by
    /// `EMQ.LIMIT`): its claims then read each job's `timeout` and keep its `deadline`.
    Timed,
    /// `1` once a job of the queue was enqueued in a named group: the queue's ready jobs are
    /// then routed by group, and its claims take turns between the groups.
    Groups,
    /// How many jobs of one group may be active at once, for each group without a limit of
    /// its own (`EMQ.LIMIT ... GROUP-CONCURRENCY`).
    GroupConcurrency,
    /// How many claims one group's rate window may hold, and the window's length in ms, for
    /// each group without a rate of its own (`EMQ.LIMIT ... GROUP-RATE <n> PER <ms>`).
    GroupRate,
    GroupRatePer,
    /// How many partitions the queue spans (`EMQ.SPAN`): on a partitioned queue's own name,
    /// which then takes no job, and on each of its partitions.
    Partitions,
    /// The partitioned queue a partition belongs to (`EMQ.SPAN ... OF <queue>`).
    PartitionOf,
    /// A partition's index among the queue's `partitions`.
    Partition,
}

impl Meta {
    /// Every fact, in the order of their places ([`Meta::index`]).
    pub const ALL: [Meta; 14] = [
        Meta::Paused,
        Meta::Events,
        Meta::Concurrency,
        Meta::Rate,
        Meta::RatePer,
        Meta::Timeout,
        Meta::Timed,
        Meta::Groups,
        Meta::GroupConcurrency,
        Meta::GroupRate,
        Meta::GroupRatePer,
        Meta::Partitions,
        Meta::PartitionOf,
        Meta::Partition,
    ];

    pub fn index(self) -> usize {
        self as usize
    }

    pub fn as_cstr(self) -> &'static std::ffi::CStr {
        match self {
            Meta::Paused => c"paused",
            Meta::Events => c"events",
            Meta::Concurrency => c"concurrency",
            Meta::Rate => c"rate",
            Meta::RatePer => c"rate-per",
            Meta::Timeout => c"timeout",
            Meta::Timed => c"timed",
            Meta::Groups => c"groups",
            Meta::GroupConcurrency => c"group-concurrency",
            Meta::GroupRate => c"group-rate",
            Meta::GroupRatePer => c"group-rate-per",
            Meta::Partitions => c"partitions",
            Meta::PartitionOf => c"partition-of",
            Meta::Partition => c"partition",
        }
    }

    pub fn as_bytes(self) -> &'static [u8] {
        self.as_cstr().to_bytes()
    }
}

/// A value written to a row field.
pub enum Value<'v, T> {
    State(State),
    /// A decimal integer (`attempts`).
    Int(i64),
    /// A string the store already holds.
    Text(&'v T),
    /// Bytes the store copies (an error text).
    Bytes(&'v [u8]),
}

// By hand: a derive would ask `T: Copy`, and only references to `T` are held.
impl<T> Clone for Value<'_, T> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<T> Copy for Value<'_, T> {}

/// One queue's keys, as a transition sees them. Sets are opened (and type-checked) by
/// [`Store::open_sets`] before they are read or written; rows are named, probed and opened
/// one by one. Every method takes `&self`: a transition holds open rows while it writes.
pub trait Store {
    /// A string the store keeps and writes without copying (a server string in the host).
    type Text;
    /// The name of a job's row.
    type Name;
    /// A job's row, open for reading and writing.
    type Row<'n>
    where
        Self: 'n;

    /// The clock, in unix ms.
    fn now_ms(&self) -> i64;
    /// Tells the queue's metrics what a transition did (docs/observability.md); kept in the
    /// server's memory, never in a key. A store without metrics ignores it.
    fn observe(&self, _what: crate::protocol::metrics::Observed) {}
    /// Whether a row of the queue may hold `ready` ([`crate::protocol::metrics::Observed::Readied`]);
    /// a store that cannot tell says it may.
    fn may_be_readied(&self) -> bool {
        true
    }
    /// Tells the queue's metrics of a claim or an attempt's end, for its wait, run and
    /// end-to-end times; a store without metrics ignores it.
    fn time(&self, _what: crate::protocol::metrics::Timed) {}
    /// The queue's name.
    fn queue_name(&self) -> &[u8];
    /// A string of the store's own, holding `bytes`.
    fn text(&self, bytes: &[u8]) -> Result<Self::Text, EmqError>;
    fn bytes<'t>(&self, text: &'t Self::Text) -> &'t [u8];

    // ---- names, permissions and types: all before the first write ----

    /// The row name of job `id`, whose set member (its canonical text) is `member`.
    fn row_name(&self, id: &BrandedId, member: &Self::Text) -> Result<Self::Name, EmqError>;
    /// The caller's permission on every key, in order, checked at once (`NOPERM`).
    fn check_access(&self, keys: &[KeyRef<'_, Self::Name>]) -> Result<(), EmqError>;
    /// Opens the sets, each a zset or missing (`WRONGTYPE` otherwise).
    fn open_sets(&self, sets: &[Set]) -> Result<(), EmqError>;
    /// What a row holds, looked at without counting as a client's read.
    fn probe(&self, row: &Self::Name) -> Result<Holds, EmqError>;
    fn open_row<'n>(&'n self, row: &'n Self::Name) -> Result<Self::Row<'n>, EmqError>;

    // ---- reads ----

    /// How many members an open set has (0 for a missing one).
    fn len(&self, set: Set) -> u64;
    /// The score of `member` in an open set.
    fn score(&self, set: Set, member: &Self::Text) -> Option<f64>;
    /// Up to `limit` members with `min <= score <= max`, lowest first (by score, then bytes).
    fn range(
        &self,
        set: Set,
        min: f64,
        max: f64,
        limit: usize,
    ) -> Result<Vec<(Self::Text, f64)>, EmqError>;
    fn holds(&self, row: &Self::Row<'_>) -> Holds;
    fn field(&self, row: &Self::Row<'_>, field: Field) -> Option<Self::Text>;
    /// Three fields of a row, read together (`HMGET row a b c`).
    fn fields3(&self, row: &Self::Row<'_>, fields: [Field; 3]) -> [Option<Self::Text>; 3] {
        fields.map(|f| self.field(row, f))
    }
    /// How many fields a row holds (`HLEN`); `u64::MAX` where a store cannot tell cheaply.
    fn row_len(&self, _row: &Self::Row<'_>) -> u64 {
        u64::MAX
    }

    /// The score of the last member of an open set (the highest).
    fn last_score(&self, set: Set) -> Result<Option<f64>, EmqError>;

    // ---- a named group's ready jobs (`group:<g>`, a zset scored as `pending` is) ----

    /// How many ready jobs the group has (0 for a missing key; `WRONGTYPE` for another type).
    fn group_len(&self, group: &[u8]) -> Result<u64, EmqError>;
    /// The group's first `limit` ready jobs, lowest first (by score, then bytes).
    fn group_range(&self, group: &[u8], limit: usize) -> Result<Vec<(Self::Text, f64)>, EmqError>;
    /// The score of `member` in the group's ready jobs.
    fn group_score(&self, group: &[u8], member: &Self::Text) -> Result<Option<f64>, EmqError>;
    /// `ZADD group:<g> score member`.
    fn group_add(&self, group: &[u8], score: i64, member: &Self::Text) -> Result<(), EmqError>;
    /// `ZREM group:<g> member ...` (and `del` when it is left empty), as
    /// [`Store::remove_many`]; and how many ready jobs the group has left.
    fn group_remove(&self, group: &[u8], members: &[&Self::Text]) -> Result<Removed, EmqError>;

    // ---- writes, each with its keyspace event and its effect ----

    /// `ZADD set score member`: no event and no effect when the member had that score.
    fn add(&self, set: Set, score: i64, member: &Self::Text) -> Result<(), EmqError>;
    /// Members, each at its score (new ones, or, in `turns`, ones moved): one `zadd` event and
    /// one variadic `ZADD` effect.
    fn add_many(&self, set: Set, members: &[(i64, &Self::Text)]) -> Result<(), EmqError>;
    /// `ZREM set member` (and `del` when the set is left empty); whether it was there.
    fn remove(&self, set: Set, member: &Self::Text) -> Result<bool, EmqError>;
    /// `ZREM set member [member ...]` of the members that are there: one `zrem` event (and
    /// `del` when the set is left empty) and one variadic effect, however many it removes;
    /// whether each was there.
    fn remove_many(&self, set: Set, members: &[&Self::Text]) -> Result<Vec<bool>, EmqError>;
    /// `ZREMRANGEBYSCORE set -inf max` (`+inf` for `None`), whose members the caller read: all
    /// of them, in `members`. One `zremrangebyscore` event (and `del` when the set is left
    /// empty) and one effect, however many it removes.
    fn remove_upto(
        &self,
        set: Set,
        max: Option<i64>,
        members: &[Self::Text],
    ) -> Result<(), EmqError>;
    /// A new row: `state`, `attempts 0`, `payload`, in the reference script's order, then
    /// `priority` when it is not 0, `unique` when the job holds a unique key, and up to
    /// [`MORE_FIELDS`] `more`, in one `HSET`.
    fn write_row(
        &self,
        row: &Self::Row<'_>,
        state: State,
        payload: &Self::Text,
        priority: i64,
        unique: Option<&[u8]>,
        more: &[(Field, Value<'_, Self::Text>)],
    ) -> Result<(), EmqError>;
    /// `HSET row field value ...`.
    fn set_fields(
        &self,
        row: &Self::Row<'_>,
        fields: &[(Field, Value<'_, Self::Text>)],
    ) -> Result<(), EmqError>;
    fn delete_row(&self, row: &Self::Row<'_>) -> Result<(), EmqError>;

    // ---- a row's fields by name: a parent's children (protocol::flow) ----

    /// `HMGET row field a b c`: a field named at run time (a child's, in a store text) and
    /// three others, read together.
    fn row_get_with3(
        &self,
        row: &Self::Row<'_>,
        field: &Self::Text,
        fields: [Field; 3],
    ) -> (Option<Self::Text>, [Option<Self::Text>; 3]);
    /// `HMGET row field a b`, as [`Store::row_get_with3`] with two others.
    fn row_get_with2(
        &self,
        row: &Self::Row<'_>,
        field: &Self::Text,
        fields: [Field; 2],
    ) -> (Option<Self::Text>, [Option<Self::Text>; 2]);
    /// `HSET row field value a va ...`: a field named at run time, then up to three others,
    /// in one write with one event and one effect.
    fn set_named(
        &self,
        row: &Self::Row<'_>,
        named: (&Self::Text, &[u8]),
        fields: &[(Field, Value<'_, Self::Text>)],
    ) -> Result<(), EmqError>;
    /// One step of `HSCAN row cursor COUNT count`, as [`Store::table_scan`].
    fn row_scan(&self, row: &Self::Name, cursor: u64, count: usize) -> Result<ScanStep, EmqError>;

    // ---- hand-overs to parents, made by a transition and delivered after it ----

    /// Keeps a finished child's hand-over for the caller to deliver once the transition ends.
    fn defer(&self, delivery: Delivery);
    /// The hand-overs kept so far, taken.
    fn take_deferred(&self) -> Vec<Delivery>;
    /// `PEXPIREAT row at_ms`.
    fn expire_row(&self, row: &Self::Row<'_>, at_ms: i64) -> Result<(), EmqError>;

    // ---- the queue's meta hash and event stream (protocol.md §9) ----

    /// A field of the `meta` hash, looked at without counting as a client's read (`WRONGTYPE`
    /// when the key holds another type).
    fn meta(&self, field: Meta) -> Result<Option<Vec<u8>>, EmqError>;
    /// `HSET meta field value`.
    fn set_meta(&self, field: Meta, value: &[u8]) -> Result<(), EmqError>;
    /// `HDEL meta field`; whether it was there.
    fn del_meta(&self, field: Meta) -> Result<bool, EmqError>;
    /// The event stream's cap while it is on, read once for the whole call: the first call
    /// also checks the caller's permission on the stream and its type, so a transition calls
    /// it before its first write.
    fn events(&self) -> Result<Option<u64>, EmqError>;
    /// Appends an entry to the event stream (`XADD events MAXLEN ~ cap * field value ...`),
    /// after [`Store::events`] said it is on.
    fn append_event(&self, cap: u64, fields: &[(&[u8], &[u8])]) -> Result<(), EmqError>;
    /// Wakes the claimers blocked on the pending set.
    fn wake_claimers(&self) -> Result<(), EmqError>;

    // ---- the queue's tables (protocol.md §9) ----

    /// `HGET table field` (`WRONGTYPE` when the key holds another type).
    fn table_get(&self, table: Table, field: &[u8]) -> Result<Option<Self::Text>, EmqError>;
    /// `HINCRBY table field n` for each count (a field missing or not a number counts 0), in
    /// one `HSET` of the new counts: one event and one effect.
    fn table_add_many(&self, table: Table, counts: &[(&[u8], u64)]) -> Result<(), EmqError> {
        let mut made = Vec::with_capacity(counts.len());
        for &(field, n) in counts {
            let old = self.table_get(table, field)?;
            let old = old
                .as_ref()
                .and_then(|t| std::str::from_utf8(self.bytes(t)).ok()?.parse::<u64>().ok());
            made.push(old.unwrap_or(0).saturating_add(n).to_string().into_bytes());
        }
        let fields: Vec<(&[u8], &[u8])> = counts
            .iter()
            .zip(&made)
            .map(|((f, _), v)| (*f, &v[..]))
            .collect();
        self.table_set_many(table, &fields)
    }
    /// `HSET table field value`.
    fn table_set(&self, table: Table, field: &[u8], value: &[u8]) -> Result<(), EmqError>;
    /// `HSET table field value [field value ...]`: one event and one effect.
    fn table_set_many(&self, table: Table, fields: &[(&[u8], &[u8])]) -> Result<(), EmqError>;
    /// `HDEL table field` (and `del` when the table is left empty); whether it was there.
    fn table_del(&self, table: Table, field: &[u8]) -> Result<bool, EmqError>;
    /// How many fields the table has (0 for a missing one; `WRONGTYPE` for another type).
    fn table_len(&self, table: Table) -> Result<u64, EmqError>;
    /// One step of `HSCAN table cursor COUNT count`: the next cursor (0 at the end) and about
    /// `count` fields with their values (a small table in one step).
    fn table_scan(&self, table: Table, cursor: u64, count: usize) -> Result<ScanStep, EmqError>;
}
