// Types of the echomq package (the JavaScript in src/ is what runs; `make lint` checks these
// against test/types.ts with tsc --strict).
import type { EventEmitter } from 'node:events';

/** A connected node-redis v4 client (`createClient`) or cluster client (`createCluster`). */
export type Client = {
  sendCommand(...args: any[]): Promise<unknown>;
  duplicate(...args: any[]): any;
};

/** A payload or result: a string or bytes as they are, any other value as JSON. */
export type Payload = unknown;

export interface EnqueueOptions {
  /** The job's id (`JOB` and 11 base62 digits); minted here when not given. */
  id?: string;
  /** Due in this many ms (the job waits in `scheduled`). */
  delay?: number;
  /** Due at this time (unix ms or a Date). */
  at?: number | Date;
  /** Lower goes first; -1,000,000 to 1,000,000, default 0. */
  priority?: number;
  /** Enqueue only while no job holds this key; the holder's id is returned otherwise. */
  unique?: string;
  /** Hold the unique key this many ms from the enqueue, whatever becomes of the job. */
  uniqueFor?: number;
  /** Each attempt's hard limit, ms from its claim (1 to a year): past it the server fails the
   * attempt with the error `timeout` and the worker stops its handler (its `timeout` event). */
  timeout?: number;
  /** The job's group in its queue (a tenant, say: 1 to 128 printable ASCII bytes without `{`
   * or `}`, which the server checks): claims take the groups with ready jobs in turn, the jobs
   * without one (the default group) being one more; priorities order the jobs within a group.
   * Its row's `group` names it. */
  group?: string;
  /** Headers that go with the job to each attempt (`job.headers`): at most 32, each key 1 to 64
   * letters, digits or `!#$%&'*+-.^_\`|~`, each value up to 8,192 bytes without CR or LF (the
   * server checks them). The queue's `inject` hook adds the trace context; these win. */
  headers?: Record<string, string>;
  /** A parent: it waits (in `waiting`) until this many children have finished, 1-100,000. */
  children?: number;
  /** A child of each (at most 16): on a cluster, `EMQ.ADOPT` goes first to a parent whose
   * queue has another slot than this job's (a partitioned queue's parent: its partition's). */
  parents?: ParentRef[];
}

/** What a child's death or cancelling does to its parent: `fail` (the default) kills the
 * parent, naming the child in its error; `ignore` just counts the child as finished. */
export type OnFail = 'fail' | 'ignore';

/** A child's parent: a job enqueued with `children`. A parent in a partitioned queue is
 * found in the partition its `group`, or else its id, routes to (the queue's width read once);
 * a partition's own name is taken as it is. */
export interface ParentRef {
  queue: string;
  id: string;
  /** The parent's group, when it has one: a partitioned queue keeps it by its group. */
  group?: string;
  onFail?: OnFail;
}

/** A job of a flow (`Queue.flow`, `chain`, `batch`). `queue` and `id`, where missing, are
 * written in by the builder before anything is sent (the builder's queue; a minted id), so
 * the same spec given again enqueues the same jobs. */
export interface FlowNode {
  queue?: string;
  payload: Payload;
  id?: string;
  /** The policy of this node for its parent (a root has none). */
  onFail?: OnFail;
  priority?: number;
  delay?: number;
  at?: number | Date;
  /** Each attempt's hard limit, ms from its claim (`EnqueueOptions.timeout`). */
  timeout?: number;
  /** Its group (`EnqueueOptions.group`; checked before anything is sent): in a partitioned
   * queue the node goes to the partition its group routes to, where its children find it. */
  group?: string;
  /** Its children: they run first, this job once they have all finished. */
  children?: FlowNode[];
}

/** A flow node once built: its queue and id are known. */
export interface BuiltFlowNode extends FlowNode {
  queue: string;
  id: string;
  children?: BuiltFlowNode[];
}

/** How a child ended, as its parent sees it (`EMQ.CHILDREN`). */
export interface ChildOutcome {
  queue: string;
  id: string;
  status: 'waiting' | 'acked' | 'dead' | 'cancelled';
  /** The result (acked) or the error text (dead), as text. */
  data: string | null;
}

/** A parent's children keyed `<queue>:<id>` (a job id has no `:`; the last one splits it). */
export type Children = Map<string, ChildOutcome>;

/** One outbox entry a worker delivered (its `delivered` event). */
export interface Handover {
  /** The child's queue (the worker's) and id. */
  queue: string;
  id: string;
  parentQueue: string;
  parentId: string;
  outcome: string;
  policy: string;
  /** `EMQ.HANDOVER`'s answer: `counted`, `duplicate` or `orphan`. */
  reply: string;
}

/** A job of `enqueueMany`. `EMQ.MENQUEUE` carries no timeout (the queue's, `limit`, times it)
 * and no group (its jobs are the queue's default group's). */
export interface JobSpec {
  payload: Payload;
  id?: string;
  priority?: number;
  /** As `EnqueueOptions.headers`. */
  headers?: Record<string, string>;
}

export type SetName = 'pending' | 'active' | 'scheduled' | 'dead' | 'waiting';

export interface Stats {
  /** Every ready job, grouped or not. */
  pending: number;
  active: number;
  scheduled: number;
  dead: number;
  /** Parents waiting for their children. */
  waiting: number;
  paused: number;
  concurrency: number | null;
  rate: number | null;
  'rate-per': number | null;
  'rate-used': number;
  /** The queue's limit on one attempt (ms) for jobs without their own; null when unset. */
  timeout: number | null;
  /** How many named groups the queue knows: with ready or active jobs, a limit of their own or
   * a pause (0 in a queue that never used `group`). */
  groups: number;
  /** Each group's default limits (`Limits`). */
  'group-concurrency': number | null;
  'group-rate': number | null;
  'group-rate-per': number | null;
  /** A partitioned queue's: each partition's own, in order (the fields above add them up:
   * the sets, `groups`, `rate-used`, the limits set; `paused` 1 while any partition is). */
  partitions?: Stats[];
}

export interface Limits {
  active: number;
  concurrency: number | null;
  rate: number | null;
  'rate-per': number | null;
  'rate-used': number;
  /** The queue's limit on one attempt (ms) for jobs without their own; null when unset. */
  timeout: number | null;
  /** Each group's limit on its active jobs, for the groups without their own; null when unset. */
  'group-concurrency': number | null;
  /** Each group's claims every `group-rate-per` ms, for the groups without their own. */
  'group-rate': number | null;
  'group-rate-per': number | null;
  /** A partitioned queue's: each partition's own, in order (`concurrency`, `rate`, `active`
   * and `rate-used` above add them up). */
  partitions?: Limits[];
}

export interface LimitOptions {
  /** Jobs active at once; null removes the limit. */
  concurrency?: number | null;
  /** Claims every `per` ms; null removes the limit. */
  rate?: number | null;
  per?: number;
  /** Each attempt's limit (ms) of the queue's jobs without their own; null removes it. */
  timeout?: number | null;
  /** Each group's jobs active at once, for the groups without a limit of their own. */
  groupConcurrency?: number | null;
  /** Each group's claims every `groupPer` ms, for the groups without a rate of their own. */
  groupRate?: number | null;
  groupPer?: number;
  /** Removes every limit of the queue (the groups' own stay). */
  off?: boolean;
}

/** A group's own limits (`Queue.groupLimit`); null removes one, the queue's default applies. */
export interface GroupLimitOptions {
  concurrency?: number | null;
  /** Claims of the group's jobs every `per` ms. */
  rate?: number | null;
  per?: number;
}

/** `EMQ.LIMIT <queue> GROUP <group>`'s reply: one group's limits and their use. */
export interface GroupLimits {
  group: string;
  active: number;
  ready: number;
  /** Its own limit; null: the queue's `group-concurrency` applies. */
  concurrency: number | null;
  'group-concurrency': number | null;
  /** 1 while its limit holds it back (claims pass over it), else 0. */
  held: number;
  /** Its own rate; null: the queue's `group-rate` applies. */
  rate: number | null;
  'rate-per': number | null;
  /** Its claims in the rate window now. */
  'rate-used': number;
  'group-rate': number | null;
  'group-rate-per': number | null;
}

/** One named group of `Queue.groups`. */
export interface GroupInfo {
  group: string;
  ready: number;
  active: number;
  /** Its concurrency limit in effect: its own, or the queue's default; null for none. */
  concurrency: number | null;
  paused: number;
  /** When a pause given a time ends (unix ms); null for one until resumed, or no pause. */
  'paused-until': number | null;
  /** 1 while its limit holds it back, else 0. */
  held: number;
  /** Its rate in effect (own or default), and its claims in the window now. */
  rate: number | null;
  'rate-per': number | null;
  'rate-used': number;
}

/** Durations counted in fixed buckets (`EMQ.METRICS`). */
export interface Histogram {
  count: number;
  sumMs: number;
  /** `[le, count]`: how many took at most `le` ms (`null`: any time), cumulative, ascending. */
  buckets: [number | null, number][];
}

/** A queue's metrics as the server keeps them (`EMQ.METRICS`, docs/observability.md). */
export interface Metrics {
  /** Whether the server keeps metrics now (`emq.metrics`); while it does not, counts stand still. */
  enabled: boolean;
  /** Each event's count, by the event stream's names (`enqueued`, `claimed`, `acked`, ...). */
  events: Record<string, number>;
  /** From ready to claimed. */
  wait: Histogram;
  /** From claimed to settled, by how the attempt ended: `acked`, `failed`, `dead`, `timed-out`. */
  run: Record<string, Histogram>;
  /** From the id's minting to the ack. */
  endToEnd: Histogram;
  /** How long the default group's first pending job has waited; `null`: nothing pending. */
  oldestPendingMs: number | null;
}

/** The least bucket bound (ms) holding at least the fraction `q` of the durations. */
export function quantileBound(h: Histogram, q: number): number | null;

export interface GroupsPage {
  /** Pass it back for the next page; `'0'` at the end (a partitioned queue's:
   * `<partition>:<cursor there>`). */
  cursor: string;
  /** The largest backlog first. */
  groups: GroupInfo[];
}

/** `EMQ.JOB`'s reply: the row's fields where present, the set and the score there. */
export interface JobRow {
  id: string;
  state?: string;
  attempts?: number;
  payload?: string;
  error?: string;
  result?: string;
  progress?: string;
  priority?: number;
  unique?: string;
  set: SetName | null;
  due?: number;
  'lease-deadline'?: number;
  'died-at'?: number;
  /** A parent's: the children it waits for, those registered so far, those finished. */
  children?: number;
  adopted?: number;
  finished?: number;
  /** The token of the attempt `EMQ.CANCEL` ended while it ran (kept after a requeue). */
  cancelled?: number;
  /** The job's own limit on one attempt, ms (`EnqueueOptions.timeout`). */
  timeout?: number;
  /** The job's group (`EnqueueOptions.group`); none for a job of the default group. */
  group?: string;
  /** The job's headers (`EnqueueOptions.headers`); none for a job without. */
  headers?: Record<string, string>;
  /** A timed attempt's deadline and the token of that attempt, `<unix-ms>:<token>`: in a queue
   * that uses timeouts (an earlier attempt's is left until the next timed claim). */
  deadline?: string;
  /** The token of the attempt its deadline ended. */
  timedout?: number;
  /** A child's parents, one `<queue> <id> <fail|ignore>` a line. */
  parents?: string;
  /** A parent a hand-over found gone (`EMQ.DELIVERED ... ORPHAN`). */
  orphan?: string;
  [field: string]: unknown;
}

export interface JobSummary {
  id: string;
  score: number | string;
  attempts: number | null;
  payload?: string | null;
  error?: string | null;
}

export interface JobsPage {
  /** Pass it back for the next page; `'0'` at the end (a partitioned queue's:
   * `<partition>:<cursor there>`). */
  cursor: string;
  jobs: JobSummary[];
}

export interface Cron {
  name: string;
  spec: string | null;
  every: number | null;
  priority: number;
  next: number;
  last: number | null;
  payload: string;
}

export interface QueueEvent {
  /** The stream entry's id (pass it as `from` to resume after it). */
  streamId: string;
  event: 'enqueued' | 'scheduled' | 'claimed' | 'acked' | 'retrying' | 'dead' | 'promoted' | 'expired' | 'cancelled' | 'requeued' | 'purged' | 'paused' | 'resumed';
  /** The job's id; null for `paused` and `resumed`. */
  id: string | null;
  attempt: number | null;
}

export declare const CHUNK: number;
export declare const PURGE_COUNT: number;
export declare const CHILDREN_PAGE: number;
export declare const MAX_CHILDREN: number;
export declare const MAX_PARENTS: number;
export declare const SWEEP_EVERY: number;
export declare const SWEEP_COUNT: number;
/** Most unfinished children of one parent a cancel takes, and most levels below (the module's bounds). */
export declare const CANCEL_CHILDREN: number;
export declare const CANCEL_DEPTH: number;
/** Most partitions of a queue. */
export declare const MAX_PARTITIONS: number;
/** Longest name of a partitioned queue, in bytes. */
export declare const MAX_NAME_LEN: number;
/** FNV-1a, 32 bits. */
export declare function fnv1a32(bytes: Uint8Array): number;
/** The partition, of `width`, of a job with this group (or else id). */
export declare function route(width: number, key: string): number;
/** The slots partition `index` of `width` owns, `[first, past the last]`; null out of range. */
export declare function share(index: number, width: number): [number, number] | null;
/** The name of partition `index` of `queue`'s `width`; null for no such partition. */
export declare function partitionName(queue: string, index: number, width: number): string | null;

/** Writes the current trace context into a job's headers, W3C style:
 * `(carrier) => propagation.inject(context.active(), carrier)` with @opentelemetry/api. */
export type Inject = (carrier: Record<string, string>) => void;

export interface QueueOptions {
  /** How often a transient failure is tried again (8). */
  retries?: number;
  /** Called with a fresh carrier at each enqueue (once per `enqueueMany`). */
  inject?: Inject;
  /** Replicas each enqueue waits for (`WAIT`, 0: none); fewer: `EmqNotReplicatedError`. */
  waitReplicas?: number;
  /** `WAIT`'s timeout, ms (1,000). */
  waitTimeout?: number;
}

export declare class Queue {
  constructor(client: Client, name: string, options?: QueueOptions);
  readonly client: Client;
  readonly name: string;
  retries: number;
  readonly inject: Inject | undefined;
  /** `waitReplicas` and `waitTimeout` (ms) checked; null without a wait. */
  readonly wait: { replicas: number; timeout: number } | null;
  /** The partitions its jobs route over as far as this Queue knows: 0 for an ordinary queue or
   * a partition, undefined until learned (an enqueue or a `cron` learns it from the server's
   * `EMQSPANNED`; the calls on one job or on every partition ask `EMQ.WIDTH` once; `uncron`,
   * `crons` and a walk of `jobs` or `groups` from `'0'` read it afresh). */
  knownWidth: number | undefined;
  /** `EMQ.WIDTH`: the queue's partitions, 0 for an ordinary queue; a partition answers its
   * queue's (and routes as itself). */
  width(): Promise<number>;
  /** The width to route by, `EMQ.WIDTH` asked once when not known. */
  routingWidth(): Promise<number>;
  /** Marks the queue partitioned over `width` (1-1,024; it must hold no job): each partition,
   * then its own name; whether anything changed. Jobs held, another width or a partition's
   * name: `EmqSpanError`, asked first, with no partition marked. */
  span(width: number): Promise<boolean>;
  /** Makes it ordinary again: each partition (one holding jobs refuses, `EmqSpanError`), then
   * its own name; whether anything changed. */
  unspan(): Promise<boolean>;
  /** The Queues of its partitions (`EMQ.WIDTH` asked once); none for an ordinary queue. */
  partitions(): Promise<Queue[]>;
  /** The Queues of its `width` partitions, in order. */
  partitionQueues(width: number): Queue[];
  /** The Queue a job of this group (or else id) is in, by the width known: itself when ordinary. */
  queueFor(key: string): Queue;
  /** `queueFor` once the width is known. */
  locate(key: string): Promise<Queue>;
  /** Another queue on the same client, with the same retries and hook (the same Queue for a
   * name each time). */
  sibling(name: string): Queue;
  /** `command <queue> ...args`, retried while transient, a refusal as its typed error. */
  call(command: string, ...args: Array<string | number | Uint8Array>): Promise<any>;
  /** A whole command (queue included), routed by the queue. */
  send(args: Array<string | Uint8Array>, readonly?: boolean): Promise<any>;
  /** `call` for a write: with `waitReplicas`, followed by `WAIT` on the queue's node; the reply,
   * how many replicas confirmed it (null without a wait), and whether fewer than asked. */
  write(command: string, ...args: Array<string | number | Uint8Array>): Promise<{ value: any; confirmed: number | null; short: boolean }>;
  /** Enqueues one job; its id. A partitioned queue's goes to the partition its group, or else its
   * id, routes to (the width learned from the first `EMQSPANNED`). */
  enqueue(payload: Payload, options?: EnqueueOptions): Promise<string>;
  /** `enqueue`, answering also the queue the job went to (a partitioned queue's partition).
   * `placed`: the `parents` name the queues their jobs are in already (none is looked up). */
  enqueueJob(payload: Payload, options?: EnqueueOptions, placed?: boolean): Promise<{ id: string; queue: string }>;
  /** Enqueues every job (`EMQ.MENQUEUE`s of `chunk`, a partition's apart); their ids, in order. */
  enqueueMany(jobs: Iterable<JobSpec>, options?: { chunk?: number }): Promise<string[]>;
  /** The counts and limits (`EMQ.STATS`); a partitioned queue's added up over its partitions. */
  stats(): Promise<Stats>;
  /** The queue's metrics as the server that holds it keeps them (`EMQ.METRICS`); a partitioned
   * queue's, the partitions' of the width this Queue knows (`EMQ.WIDTH` read once when it is
   * not known) added up: each event's count summed, each histogram summed bucket by bucket
   * (where a partition's bucket bounds differ, the one with more counted is kept), the oldest
   * pending age the greatest, `enabled` true only when every partition's is. */
  metrics(): Promise<Metrics>;
  /** A job's row (on a partitioned queue, from the partition its id routes to: a grouped job's
   * through `queueFor(group)`, or its handle's `queue`); null for none. */
  job(id: string): Promise<JobRow | null>;
  /** One page of a set (`EMQ.JOBS`). A partitioned queue's walk takes its partitions in turn,
   * a page from one, its cursor `<partition>:<cursor there>`, and answers an empty page only at
   * its end. Only the `<partition>:` part is checked by the client: a cursor whose partition
   * is not one of the queue's throws a `RangeError` before anything is sent (but `EMQ.WIDTH`,
   * when the width is not known); the cursor there is the server's to check
   * (`EmqCursorError`). A walk's start (`'0'`) reads the width afresh (`EMQ.WIDTH`); its later
   * pages go by the width known. */
  jobs(set: SetName, options?: { cursor?: string; count?: number; withPayloads?: boolean }): Promise<JobsPage>;
  /** A parent's children and how each ended (every page of `EMQ.CHILDREN`). */
  children(id: string): Promise<Children>;
  /** Enqueues a tree top down; the same tree, every node's queue and id filled in. */
  flow(tree: FlowNode): Promise<BuiltFlowNode>;
  /** Jobs run one after another in the order given; their ids in that order. */
  chain(jobs: FlowNode[]): Promise<string[]>;
  /** Jobs and a callback that runs once all of them have finished, acked or dead. */
  batch(jobs: FlowNode[], options: { onComplete: FlowNode }): Promise<{ id: string; ids: string[] }>;
  /** Removes a pending, scheduled or waiting job (a waiting parent with its flow's unstarted
   * children, as `cancelFlow`), or ends a running job's attempt: the job goes to dead with the
   * error `cancelled`, its worker's `signal` is aborted with an `EmqCancelledError` at its next
   * renewal, and its outcome is refused (it can be requeued). Whether the job went. */
  cancel(id: string): Promise<boolean>;
  /** Removes a pending, scheduled or waiting job; a waiting parent with the children of its
   * flow that have not started, in any slot, 1,000 a parent, 8 levels deep; or ends a running
   * job's attempt, as `cancel` does: how many jobs went. */
  cancelFlow(id: string): Promise<number>;
  /** `cancelFlow` only while the job has not started: a running job is left to run (0). */
  cancelUnstarted(id: string): Promise<number>;
  requeue(id: string): Promise<boolean>;
  /** Moves up to `count` of the oldest dead jobs back (of each partition); how many. */
  requeueDead(options?: { count?: number }): Promise<number>;
  /** Deletes a set's jobs (of every partition); how many. */
  purge(set: 'pending' | 'scheduled' | 'dead', options?: { count?: number }): Promise<number>;
  /** Stops its claims (every partition's); false when it was paused already. */
  pause(): Promise<boolean>;
  resume(): Promise<boolean>;
  /** `EMQ.LIMIT`: sets those given (null removes one, `off` all), or with none reports them.
   * `timeout` (ms) times each attempt of the queue's jobs that have none of their own;
   * `groupConcurrency` and `groupRate` are each group's defaults. A partitioned queue's
   * `concurrency` and `rate` L are split: partition i gets ⌊L/n⌋, plus one for i < L mod n
   * (L below n is refused, `RangeError`); the rest is set on each partition. */
  limit(options?: LimitOptions): Promise<Limits>;
  /** One group's own limits (null removes one), or with none a report. */
  groupLimit(group: string, options?: GroupLimitOptions): Promise<GroupLimits>;
  /** Stops claims taking the group's jobs, for `ms` or until `resumeGroup`; false when it was
   * paused already. */
  pauseGroup(group: string, options?: { ms?: number }): Promise<boolean>;
  /** Lets claims take the group's jobs again; false when it was not paused. */
  resumeGroup(group: string): Promise<boolean>;
  /** One page of the named groups (`EMQ.GROUPS`), the largest backlog first (a partitioned
   * queue's: its partitions in turn, as `jobs`, the largest backlog first within each, the
   * width read afresh at the walk's start; a cursor's `<partition>:` part checked as `jobs`
   * checks it, the rest, a number, by the server: an `ERR` reply). */
  groups(options?: { cursor?: string; count?: number }): Promise<GroupsPage>;
  /** A repeating schedule; its next firing (unix ms). A partitioned queue's is kept by the
   * partition its name routes to, and fires into it; a refusal that names another width
   * (`EMQSPANNED`) is learned and the schedule sent again, as an enqueue is. */
  cron(name: string, payload: Payload, options: { spec: string; priority?: number } | { every: number; priority?: number }): Promise<number>;
  /** Removes a schedule (a partitioned queue's, from its name's partition by the width read
   * afresh, `EMQ.WIDTH`); whether there was one. */
  uncron(name: string): Promise<boolean>;
  /** Every schedule, by name (its UTF-8 bytes; a partitioned queue's: every partition's of the
   * width read afresh, `EMQ.WIDTH`). */
  crons(): Promise<Cron[]>;
  enableEvents(options?: { maxlen?: number }): Promise<boolean>;
  disableEvents(): Promise<boolean>;
  events(options?: { from?: string; block?: number; count?: number; signal?: AbortSignal }): AsyncGenerator<QueueEvent, void, undefined>;
}

export declare class Job {
  /** The queue it was claimed from: a partitioned queue's job, its partition (where it is
   * settled, renewed and read). */
  readonly queue: string;
  readonly id: string;
  /** The payload as enqueued, byte for byte (it need not be text). */
  readonly bytes: Uint8Array;
  /** The payload read as UTF-8 text. */
  readonly payload: string;
  /** This attempt's lease token: 1 for the first. */
  readonly attempt: number;
  /** Aborted when the job is cancelled while it runs (`EmqCancelledError`), the attempt runs
   * past its deadline (`EmqTimeoutError`), the lease is lost (`EmqLeaseError`), or the worker
   * closes past its timeout; the reason says which. */
  readonly signal: AbortSignal;
  /** Sent as the row's `progress` with the next renewal. */
  progress: Payload | undefined;
  leaseLost: boolean;
  /** Set when a renewal or the settle answered `EMQCANCELLED`: the job was cancelled while it
   * ran (it is dead, error `cancelled`); `signal` is aborted and no outcome is sent. */
  readonly cancelled: boolean;
  /** Set when a renewal answered `EMQTIMEOUT`: this attempt ran past its deadline (the server
   * fails it with the error `timeout`: a retry, or dead); `signal` is aborted and no outcome is
   * sent. */
  readonly timedOut: boolean;
  /** The payload parsed as JSON. */
  readonly data: any;
  /** The headers it was enqueued with (the trace context among them): empty for none. */
  readonly headers: Record<string, string>;
  /** The W3C trace context its headers carry; null for none. */
  readonly trace: TraceContext | null;
  /** A parent's children and how each ended, keyed `<queue>:<id>`. */
  children(): Promise<Children>;
}

/** A W3C `traceparent`'s parts: the trace id (32 hex), the parent span id (16 hex), sampled. */
export interface TraceContext {
  traceId: string;
  spanId: string;
  sampled: boolean;
}

/** Most headers one job carries. */
export declare const MAX_HEADERS: number;
/** A W3C `traceparent` read; null for one not well formed. */
export function parseTraceparent(value: string | undefined): TraceContext | null;
/** A W3C `traceparent` (version 00); `sampled` defaults to true. */
export function formatTraceparent(context: { traceId: string; spanId: string; sampled?: boolean }): string;

/** Thrown by a handler: fail this attempt, to be retried after `after` ms (0 to 365 days; any
 * other value throws a `RangeError` where the Retry is made). */
export declare class Retry extends Error {
  constructor(after: number, reason?: string);
  readonly after: number;
}

/** A job's handler. `context.signal` is `job.signal`: aborted when the job is cancelled while it
 * runs (its reason an `EmqCancelledError`), the attempt runs past its deadline (an
 * `EmqTimeoutError`), its lease is lost, or the worker closes past its timeout. The worker does
 * not wait for a cancelled or timed-out handler: its slot goes to the next job. */
export type Handler = (job: Job, context: { signal: AbortSignal }) => unknown;

export type Backoff = number | { type: 'fixed' | 'exponential'; delay: number } | ((attempt: number, error: unknown) => number);

/** A worker's options: each number given must be a finite number (a `TypeError` otherwise). */
export interface WorkerOptions {
  /** Most handlers running at once (4). */
  concurrency?: number;
  /** Lease of a claim, ms (30,000); renewed every `renewEvery` of it while the handler runs. */
  lease?: number;
  /** How long a claim waits in the server for a job, ms (1,000). */
  block?: number;
  /** Most jobs one claim takes (the concurrency; at most 1,000). */
  batch?: number;
  /** Renewals come every this much of the lease (1/3). */
  renewEvery?: number;
  /** How long close() waits for running handlers, ms (30,000). */
  shutdownTimeout?: number;
  /** The wait before a failed job's retry (`RETRY-IN`); without it, the server's backoff. */
  backoff?: Backoff;
  /** Close gracefully on SIGTERM and SIGINT (false). */
  handleSignals?: boolean;
  /** Start claiming at once (true); otherwise call run(). */
  autorun?: boolean;
  /** Names the worker in its events (`<hostname>:<pid>:<6 random hex>`). */
  name?: string;
  /** Called synchronously with each claim, renewal, settle, handler start and end, and step
   * of the outbox's hand-overs; what it throws is logged and ignored. */
  onEvent?: (event: WorkerEvent) => void;
  /** Runs each attempt's handler (`run`) in the caller's own scope, returning what it returns:
   * with @opentelemetry/api, a consumer span in the context `propagation.extract` reads from
   * `job.headers`. */
  around?: (job: Job, run: () => unknown) => unknown;
  /** Replicas each settle and each hand-over of the outbox waits for (`WAIT`, on the node that
   * took the write), 0 for none (0). A hand-over fewer confirmed stays in the outbox for the
   * next sweep; a settle's count is its event's `replicated`. */
  waitReplicas?: number;
  /** `WAIT`'s timeout, ms (1,000). */
  waitTimeout?: number;
}

/** One event of a worker, as `onEvent` gets it (the Python and Rust workers' contract). */
export interface WorkerEvent {
  /** A flow's steps from the outbox: `handover` (`EMQ.HANDOVER` of a finished child to its
   * parent) and `delivered` (`EMQ.DELIVERED`, its removal), the child's id and token 0, and
   * `outbox`, a read of the outbox that failed (id ''). `cancelled`: a renewal or settle of the
   * job answered `EMQCANCELLED` (both times that moment, `outcome` ok, `error` the refusal): its
   * handler's signal was aborted and nothing is sent for it. `timed_out`: the same for a renewal
   * answered `EMQTIMEOUT` (the attempt ran past its deadline; the EventEmitter event is
   * `'timeout'`). */
  kind: 'claim' | 'renew' | 'settle' | 'handler_start' | 'handler_end' | 'cancelled' | 'timed_out' | 'handover' | 'delivered' | 'outbox';
  worker: string;
  /** The job's queue: a partitioned queue's job's, its partition; the worker's queue for the
   * outbox's steps. */
  queue: string;
  id: string;
  /** The lease token: the attempt. */
  token: number;
  /** Wall-clock Unix-epoch ns when the command was sent and answered; for the handler's
   * events both are that moment. */
  sentNs: bigint;
  answeredNs: bigint;
  /** `refused`: the server answered with an error, it did not happen; `unknown`: no answer. */
  outcome: 'ok' | 'refused' | 'unknown';
  /** The refusal or lost connection, or for `handler_end` the handler's failure. */
  error: string | null;
  /** For `settle`: what was sent. */
  action: 'ack' | 'fail' | null;
  /** For `settle` and `handover`: null unless the worker has `waitReplicas`, else whether
   * `WAIT` reported at least that many replicas. */
  replicated: boolean | null;
}

export interface WorkerCounts {
  acked: number;
  failed: number;
  retried: number;
  /** Claimed jobs whose outcome was not sent (the lease lost, the worker closed first, or a
   * claim answered after a stall, its handler not started) or was refused `EMQLEASE`. Each run
   * is counted once: one later learned cancelled or past its deadline moves to that count. */
  lost: number;
  /** Jobs cancelled (`EMQ.CANCEL`) while their handlers ran: nothing was sent for them. */
  cancelled: number;
  /** Attempts that ran past their deadline (`EMQTIMEOUT`): nothing was sent for them. */
  timedOut: number;
}

/** Claims and runs a queue's jobs. On a partitioned queue (`EMQ.WIDTH` at start, or a claim's
 * `EMQSPANNED`) it claims every partition: one loop a primary, at most one blocked claim each,
 * and settles, renews and sweeps each job on its partition (`job.queue`). */
export declare class Worker extends EventEmitter {
  constructor(queue: Queue, handler: Handler, options?: WorkerOptions);
  readonly queue: Queue;
  readonly concurrency: number;
  readonly name: string;
  readonly counts: WorkerCounts;
  /** Claims and runs jobs until close(); rejects on a fatal error (also sent to 'error'). */
  run(): Promise<void>;
  /** Stops claiming, drains the running handlers (up to `timeout` ms), then aborts the rest. */
  close(timeout?: number): Promise<void>;
  on(event: 'completed', listener: (job: Job, result: unknown) => void): this;
  on(event: 'failed', listener: (job: Job, error: unknown) => void): this;
  /** A job cancelled while its handler ran: its signal aborted, its slot freed, nothing sent. */
  on(event: 'cancelled', listener: (job: Job, error: EmqCancelledError) => void): this;
  /** An attempt past its deadline: its signal aborted, its slot freed, nothing sent (the
   * server retries the job or buries it, error `timeout`). */
  on(event: 'timeout', listener: (job: Job, error: EmqTimeoutError) => void): this;
  on(event: 'error', listener: (error: unknown) => void): this;
  on(event: 'closed', listener: () => void): this;
  /** An outbox entry handed over to its parent and removed. */
  on(event: 'delivered', listener: (entry: Handover) => void): this;
  once(event: 'completed', listener: (job: Job, result: unknown) => void): this;
  once(event: 'failed', listener: (job: Job, error: unknown) => void): this;
  once(event: 'cancelled', listener: (job: Job, error: EmqCancelledError) => void): this;
  once(event: 'timeout', listener: (job: Job, error: EmqTimeoutError) => void): this;
  once(event: 'error', listener: (error: unknown) => void): this;
  once(event: 'closed', listener: () => void): this;
  once(event: 'delivered', listener: (entry: Handover) => void): this;
}

export declare const PROTOCOL_MAJOR: number;
export declare const MAX_ERROR: number;
export declare const SETTLE_BATCH: number;
export declare function checkVersion(answer: unknown): void;
export declare function errorText(error: unknown): string;
export declare function mint(): string;
export declare function eventsKey(queue: string): string;
/** CRC16-XMODEM, as a cluster computes slots. */
export declare function crc16(bytes: Uint8Array): number;
/** `CLUSTER KEYSLOT key`. */
export declare function slot(key: string): number;
/** The slot of every key of a queue. */
export declare function queueSlot(queue: string): number;
export declare function translate(error: unknown): unknown;

/** A refusal of the EchoMQ module; `code` is its reply's first word (`EMQLEASE`, ...). */
export declare class EmqError extends Error {
  constructor(message: string, cause?: unknown);
  readonly code: string;
}
export declare class EmqQueueError extends EmqError {}
export declare class EmqTypeError extends EmqError {}
export declare class EmqIdError extends EmqError {}
export declare class EmqKindError extends EmqError {}
export declare class EmqKeyError extends EmqError {}
export declare class EmqPayloadError extends EmqError {}
export declare class EmqLeaseError extends EmqError {}
/** `EMQCANCELLED`: the job was cancelled while this attempt ran; its renewal or settle is refused. */
export declare class EmqCancelledError extends EmqError {}
/** `EMQTIMEOUT`: this attempt ran past its deadline; its renewal is refused (a late settle is
 * `EMQLEASE`), and the server fails it with the error `timeout`. */
export declare class EmqTimeoutError extends EmqError {}
export declare class EmqSetError extends EmqError {}
export declare class EmqCursorError extends EmqError {}
export declare class EmqCronError extends EmqError {}
/** `EMQPARENT`: no such parent, it is not waiting, or it has all its children. */
export declare class EmqParentError extends EmqError {}
/** `EMQSPANNED <n>`: a job or claim sent to a partitioned queue's own name, or a job sent to a
 * partition its group (or else its id) does not route to. A Queue learns the width from it and
 * routes again; a partition's own refusal reaches the caller. */
export declare class EmqSpannedError extends EmqError {
  /** The partitions of the queue that refused. */
  readonly width: number;
}
/** `EMQSPAN`: a span of a queue that holds jobs or has another width or place, or an unspan of
 * a partition that holds jobs. */
export declare class EmqSpanError extends EmqError {}
/** A write the primary took that fewer replicas confirmed than the queue's `waitReplicas`
 * (`WAIT` reported `replicas`): it may be lost in a failover. Not a server refusal (`code` ''). */
export declare class EmqNotReplicatedError extends EmqError {
  /** The jobs of the unconfirmed writes. */
  readonly ids: string[];
  /** The fewest replicas a write of them was confirmed by. */
  readonly replicas: number;
  readonly wanted: number;
  /** Every job the call enqueued (each taken by the primary), in order. */
  readonly enqueued: string[];
}
export declare class EmqVersionError extends Error {}
