// The producer's side: `Queue` enqueues jobs and operates one queue, over a node-redis v4
// client or cluster client. Calls are retried through failovers and slot migrations; ids are
// minted here, so a retried enqueue stays a single job. A partitioned queue's jobs go to the
// partitions they route to (span.js), its width learned from the server's first refusal.
import { cancelFlow } from './cancel.js';
import { encode, ms, pairs } from './codec.js';
import { send } from './connection.js';
import { EmqNotReplicatedError, EmqParentError, translate } from './errors.js';
import { readEvents } from './events.js';
import { adopt, familyArgs } from './family.js';
import { carried, headerArgs, headerMap } from './headers.js';
import { batch, chain, checkWhen, flow } from './flow.js';
import { mint } from './ids.js';
import { parseMetrics, sumMetrics } from './metrics.js';
import { partitionName, route } from './partition.js';
import { sendWaited, waitSettings } from './replicas.js';
import { backoff, passing, sleep, transient } from './retry.js';
import { enqueueRows, knowWidth, readWidth, routed, span, splitLimits, sumStats, unspan } from './span.js';
import { walk } from './walk.js';

/** Jobs one `EMQ.MENQUEUE` carries (the server takes up to 10,000). */
export const CHUNK = 1000;
/** Jobs one `EMQ.PURGE` deletes (the server's default and the loop's step). */
export const PURGE_COUNT = 1000;
/** The sets a job can be in (`jobs` takes each; `purge` all but `active` and `waiting`). */
export const SETS = ['pending', 'active', 'scheduled', 'dead', 'waiting'];
/** Children one `EMQ.CHILDREN` page carries. */
export const CHILDREN_PAGE = 1000;

/** A `job(id)` reply's integer fields. */
const NUMERIC = new Set(['attempts', 'due', 'lease-deadline', 'died-at', 'priority', 'children', 'adopted', 'finished', 'cancelled', 'timeout', 'timedout']);

/**
 * @typedef {{queue: string, id: string, group?: string, onFail?: 'fail' | 'ignore'}} ParentRef a
 *   child's parent: its queue and id, and its group when it has one (which a partitioned
 *   queue routes it by)
 * @typedef {{id?: string, delay?: number, at?: number | Date, priority?: number, unique?: string, uniqueFor?: number,
 *   timeout?: number, group?: string, headers?: Record<string, string>,
 *   children?: number, parents?: ParentRef[]}} EnqueueOptions
 */

export class Queue {
  /** The partitions' Queues of the width last asked for. @type {{width: number, queues: Queue[]}} */
  #parts = { width: 0, queues: [] };
  /** Its siblings, by name. @type {Map<string, Queue>} */
  #siblings = new Map();

  /**
   * @param {any} client a connected node-redis client (`createClient`) or cluster (`createCluster`)
   * @param {string} name the queue
   * @param {{retries?: number, inject?: (carrier: Record<string, string>) => void,
   *   waitReplicas?: number, waitTimeout?: number}} [options]
   *   `retries`: how often a transient failure is tried again (8); `inject`: called with a
   *   fresh carrier at each enqueue, to write the trace context into the jobs' headers
   *   (`(c) => propagation.inject(context.active(), c)` with @opentelemetry/api);
   *   `waitReplicas` n > 0: each enqueue is followed by `WAIT n` (`waitTimeout` ms, 1,000) on
   *   the node that took it, and one fewer replicas confirmed is `EmqNotReplicatedError`
   */
  constructor(client, name, options = {}) {
    this.client = client;
    this.name = name;
    this.retries = options.retries ?? 8;
    this.inject = options.inject;
    const wait = waitSettings(options.waitReplicas, options.waitTimeout);
    this.wait = wait.replicas > 0 ? wait : null;
    /** The partitions its jobs route over as far as this Queue knows: 0 for an ordinary queue
     * (or a partition, which takes its jobs itself), undefined until learned. An enqueue
     * treats unknown as 0 and learns the width from the server's refusal (`EMQSPANNED`), as a
     * `cron` learns a stale one; the calls on one job, or on every partition, ask `EMQ.WIDTH`
     * once; `uncron`, `crons` and a walk of `jobs` or `groups` from `'0'` read it afresh.
     * @type {number | undefined} */
    this.knownWidth = undefined;
  }

  /** Another queue on the same client, with the same retries and hook (a flow's other queues,
   * a child's parents'); the same Queue for a name each time, so each keeps the width it
   * learned. */
  sibling(name) {
    if (name === this.name) return this;
    let queue = this.#siblings.get(name);
    if (queue === undefined) {
      queue = new Queue(this.client, name, this.#options());
      this.#siblings.set(name, queue);
    }
    return queue;
  }

  /** The options a sibling or a partition is made with: this Queue's. */
  #options() {
    const wait = this.wait ?? { replicas: 0, timeout: undefined };
    return { retries: this.retries, inject: this.inject, waitReplicas: wait.replicas, waitTimeout: wait.timeout };
  }

  /** `call` for a write: with `waitReplicas`, the command and `WAIT` sent together on the
   * queue's node, retried alike. The reply, how many replicas confirmed the write (null
   * without a wait), and whether that is fewer than `waitReplicas` asks (`short`). */
  async write(command, ...args) {
    const wait = this.wait;
    if (wait === null) return { value: await this.call(command, ...args), confirmed: null, short: false };
    for (let attempt = 0; ; attempt++) {
      try {
        const { replies, confirmed } = await sendWaited(this.client, this.name, [[command, this.name, ...args.map(arg)]], wait);
        if (replies[0].error !== undefined) throw replies[0].error;
        return { value: replies[0].value, confirmed, short: confirmed < wait.replicas };
      } catch (e) {
        if (!passing(e) || attempt >= this.retries) throw translate(e);
        await sleep(backoff(attempt));
      }
    }
  }

  /** `command <queue> ...args`, retried while the failure is transient; a refusal typed. */
  async call(command, ...args) {
    return this.send([command, this.name, ...args.map(arg)]);
  }

  /** A command (with its queue) sent as is, routed by the queue, retried, typed. */
  async send(args, readonly = false, options = undefined) {
    for (let attempt = 0; ; attempt++) {
      try {
        return await send(this.client, this.name, args, readonly, options);
      } catch (e) {
        if (!transient(e) || attempt >= this.retries) throw translate(e);
        await sleep(backoff(attempt));
      }
    }
  }

  // ---- partitions ----

  /** `EMQ.WIDTH`: the queue's partitions, 0 for an ordinary queue (a partition answers its
   * queue's); learned for routing. */
  async width() {
    const { width, of } = readWidth(await this.send(['EMQ.WIDTH', this.name], true));
    this.knownWidth = of === null ? width : 0;
    return width;
  }

  /** The width to route by, asking `EMQ.WIDTH` once when it is not known yet. */
  async routingWidth() {
    if (this.knownWidth === undefined) await knowWidth(this);
    return /** @type {number} */ (this.knownWidth);
  }

  /** The Queues of the `width` partitions of this queue, in order (each an ordinary queue). */
  partitionQueues(width) {
    if (this.#parts.width !== width) {
      const queues = [];
      for (let i = 0; i < width; i++) {
        const name = partitionName(this.name, i, width);
        if (name === null) throw new RangeError(`queue ${this.name} has no partition ${i} of ${width}`);
        const part = new Queue(this.client, name, this.#options());
        part.knownWidth = 0;
        queues.push(part);
      }
      this.#parts = { width, queues };
    }
    return this.#parts.queues;
  }

  /** The Queues of the partitions (`EMQ.WIDTH` asked once); none for an ordinary queue. */
  async partitions() {
    const width = await this.routingWidth();
    return width > 0 ? this.partitionQueues(width) : [];
  }

  /** `partitions()` by the width read afresh (`EMQ.WIDTH`, learned; a server without it, or a
   * user not allowed it, has ordinary queues only, as `knowWidth` has it): for the calls a
   * stale width would send to partitions that no longer hold what they look for (`uncron`,
   * `crons`, a walk of `jobs` or `groups` from its start). */
  async #currentPartitions() {
    await knowWidth(this);
    return this.partitions();
  }

  /** The Queue a job with this group (or else id) is in, by the width known: this one for an
   * ordinary queue. */
  queueFor(key) {
    const width = this.knownWidth ?? 0;
    return width > 0 ? this.partitionQueues(width)[route(width, key)] : this;
  }

  /** `queueFor` once the width is known (`EMQ.WIDTH` asked once). A grouped job is reached by
   * its group, or through its handle's `queue`, its partition. */
  async locate(key) {
    await this.routingWidth();
    return this.queueFor(key);
  }

  /**
   * Marks the queue partitioned over `width` (1 to 1,024; it must hold no job): each partition
   * `EMQ.SPAN <partition> <width> OF <queue> INDEX <i>` on its node, then `EMQ.SPAN <queue>
   * <width>`; whether anything changed. A queue that holds jobs, is spanned over another
   * width or is a partition is refused (`EmqSpanError`), asked first (`EMQ.WIDTH`, `EMQ.STATS`)
   * so that a refused span marks no partition.
   * @param {number} width
   */
  span(width) {
    return span(this, width);
  }

  /** Makes the queue ordinary again: `EMQ.UNSPAN` of each partition, then of its own name (a
   * partition that holds jobs refuses, `EmqSpanError`, and the queue stays partitioned);
   * whether anything changed. Each partition is retired: a producer that still knows the old
   * width is refused there with `EMQSPANNED 0` and sends to the queue's own name, which takes
   * the job or answers its new width. */
  unspan() {
    return unspan(this);
  }

  // ---- producing ----

  /**
   * Enqueues one job; its id, or with `unique` the holder's id while another job holds the key.
   * With `children` it is a parent, waiting until that many children have finished; with
   * `parents` it is their child (on a cluster, `EMQ.ADOPT` first for a parent in another slot).
   * A parent in a partitioned queue is in the partition its `group`, or else its id, routes to:
   * each parent's queue's width is asked once (`EMQ.WIDTH`), and again when a parent refuses.
   * With `timeout` (ms), each attempt of it is ended by the server that long after its claim.
   * With `group` (a tenant, say; the server checks it), it is in that group of the queue: claims
   * take the groups with ready jobs in turn, and its row's `group` names it. `headers` (at most
   * 32 string keys and values) go with the job to each attempt (`job.headers`), beside what the
   * queue's `inject` hook writes.
   * @param {unknown} payload a string or bytes as they are, anything else as JSON
   * @param {EnqueueOptions} [options]
   */
  async enqueue(payload, options = {}) {
    return (await this.enqueueJob(payload, options)).id;
  }

  /**
   * `enqueue`, answering also the queue the job went to (of a partitioned queue, its
   * partition). With `placed`, the `parents` name the queues their jobs are in (a flow's, as
   * their own enqueues answered), and none is looked up.
   * @param {unknown} payload
   * @param {EnqueueOptions} [options]
   * @param {boolean} [placed]
   * @returns {Promise<{id: string, queue: string}>}
   */
  async enqueueJob(payload, options = {}, placed = false) {
    const id = options.id ?? mint();
    const args = [id, encode(payload)];
    if (options.delay !== undefined && options.at !== undefined) throw new TypeError('give delay or at, not both');
    if (options.delay !== undefined) args.push('DELAY', ms(options.delay, 'delay'));
    if (options.at !== undefined) args.push('AT', ms(options.at, 'at'));
    if (options.priority !== undefined) args.push('PRIORITY', String(options.priority));
    if (options.unique !== undefined) {
      args.push('UNIQUE', options.unique);
      if (options.uniqueFor !== undefined) args.push('FOR', ms(options.uniqueFor, 'uniqueFor'));
    } else if (options.uniqueFor !== undefined) {
      throw new TypeError('uniqueFor is the window of a unique key');
    }
    if (options.timeout !== undefined) args.push('TIMEOUT', ms(options.timeout, 'timeout'));
    if (options.group !== undefined) args.push('GROUP', options.group);
    args.push(...headerArgs(carried(this.inject, options.headers)));
    familyArgs(options); // checked before anything is sent
    // A partitioned queue's job goes to the partition its group, or else its id, routes to.
    const key = options.group ?? id;
    const given = options.parents ?? [];
    // A child's parents on other nodes register it first (`EMQ.ADOPT`), under the queue it goes
    // to: the width is read before, when not known, and again after a refusal, so no parent
    // waits for it in a queue it was not enqueued in.
    if (given.length > 0 && this.knownWidth === undefined) await knowWidth(this);
    let parents = placed ? given : await this.parentHomes(given, false);
    for (let refreshed = placed; ; refreshed = true) {
      const all = [...args, ...familyArgs({ children: options.children, parents })];
      let queue = this.name;
      try {
        const reply = await routed(
          this,
          key,
          async (target) => {
            queue = target.name;
            if (parents.length > 0) await adopt(target, id, parents);
            return target.write('EMQ.ENQUEUE', ...all);
          },
          parents.length > 0,
        );
        // 1 (written) or 0 (this id was enqueued already) is the job's own id; a string, the holder's.
        const out = typeof reply.value === 'string' ? reply.value : id;
        if (reply.short) throw new EmqNotReplicatedError([out], Number(reply.confirmed), Number(this.wait?.replicas));
        return { id: out, queue };
      } catch (e) {
        if (!(e instanceof EmqParentError)) throw e;
        // A retried child whose parent has moved on (finished, or all its children counted):
        // the job is there already, which is what a duplicate enqueue answers.
        const home = this.queueFor(key);
        if (options.id !== undefined && (await home.job(id)) !== null) return { id, queue: home.name };
        if (refreshed) throw e;
        // A parent's queue spanned (or made ordinary again) since its width was read.
        const fresh = await this.parentHomes(given, true);
        if (fresh.every((p, i) => p.queue === parents[i].queue)) throw e;
        parents = fresh;
      }
    }
  }

  /**
   * The parents as their jobs' queues name them: a parent in a partitioned queue is in the
   * partition its `group`, or else its id, routes to. Each parent queue's width is read once
   * (its sibling keeps it), or again with `fresh`.
   * @param {ParentRef[]} parents
   * @param {boolean} fresh
   * @returns {Promise<ParentRef[]>}
   */
  async parentHomes(parents, fresh) {
    return Promise.all(
      parents.map(async (parent) => {
        const queue = this.sibling(parent.queue);
        if (fresh || queue.knownWidth === undefined) await knowWidth(queue);
        const home = queue.queueFor(parent.group ?? parent.id);
        return home === queue ? parent : { ...parent, queue: home.name };
      }),
    );
  }

  /**
   * Enqueues every job, `chunk` to one atomic `EMQ.MENQUEUE`; their ids, in order. A job here
   * has no `timeout` of its own (`EMQ.MENQUEUE` carries none): the queue's (`limit`) times it;
   * nor a `group`: it is in the queue's default group. Each carries its `headers`, beside what
   * the queue's `inject` hook writes once for the call. A partitioned queue's jobs go, a call
   * a partition, to the partitions their ids route to.
   * @param {Iterable<{payload: unknown, id?: string, priority?: number, headers?: Record<string, string>}>} jobs
   * @param {{chunk?: number}} [options]
   */
  async enqueueMany(jobs, options = {}) {
    const asked = options.chunk ?? CHUNK;
    if (!Number.isInteger(asked)) throw new RangeError(`chunk is a whole number of jobs, not ${String(options.chunk)}`);
    const chunk = Math.min(10_000, Math.max(1, asked));
    /** @type {string[]} */
    const ids = [];
    const context = carried(this.inject, undefined);
    // Every row is made (and so checked) before the first is sent: a job that cannot be sent
    // throws with nothing written, not after the chunks before it.
    const rows = [];
    for (const job of jobs) {
      const id = job.id ?? mint();
      checkWhen({ priority: job.priority });
      /** @type {Array<string | Buffer>} */
      const args = [];
      if (job.priority !== undefined) args.push('PRIORITY', String(job.priority));
      args.push(...headerArgs(context ? { ...context, ...job.headers } : job.headers));
      args.push(id, encode(job.payload));
      rows.push({ id, args, at: rows.length + 1 });
    }
    ids.push(...rows.map((row) => row.id));
    const short = await enqueueRows(this, rows, chunk);
    if (short !== null) throw new EmqNotReplicatedError(short.ids, short.fewest, short.wanted, ids);
    return ids;
  }

  // ---- looking ----

  /** The counts of each set (`pending`: every ready job, grouped or not), how many named groups
   * the queue knows (`groups`: with ready or active jobs, a limit of their own or a pause), the
   * pause flag, and the limits and their use (`EMQ.STATS`). A partitioned queue's are its
   * partitions' added up, each partition's own in `partitions`. */
  async stats() {
    const parts = await this.partitions();
    if (parts.length > 0) return sumStats(await Promise.all(parts.map((p) => p.stats())));
    return pairs(await this.send(['EMQ.STATS', this.name], true));
  }

  /**
   * The queue's metrics as the server that holds it keeps them (`EMQ.METRICS`): they start from
   * zero when that server restarts or a replica takes over. A partitioned queue's are the
   * partitions' of the width this Queue knows (`EMQ.WIDTH` asked once when it is not known)
   * added up (`sumMetrics`): each event's count summed, each histogram summed bucket by bucket
   * (where a partition's bucket bounds differ, the one with more counted is kept), the oldest
   * pending job's age the greatest, `enabled` only when every partition's is.
   */
  async metrics() {
    const parts = await this.partitions();
    if (parts.length > 0) return sumMetrics(await Promise.all(parts.map((p) => p.metrics())));
    // From the primary: a replica keeps none.
    return parseMetrics(await this.send(['EMQ.METRICS', this.name], false));
  }

  /** A job's row, its set and its score there (`EMQ.JOB`), its `headers` an object; null when
   * there is no such job. A partitioned queue's, from the partition its id routes to. */
  async job(id) {
    const home = await this.locate(id);
    if (home !== this) return home.job(id);
    const reply = await this.send(['EMQ.JOB', this.name, id], true);
    if (reply === null || reply === undefined) return null;
    const row = pairs(reply);
    if (row.headers !== undefined) row.headers = headerMap(row.headers);
    for (const key of NUMERIC) if (typeof row[key] === 'string' && /^-?\d+$/.test(row[key])) row[key] = Number(row[key]);
    return row;
  }

  /**
   * One page of a set (`EMQ.JOBS`): pass the reply's cursor back for the next; `'0'` at the end.
   * A partitioned queue's walk takes its partitions in turn, each page one partition's, its
   * cursor `<partition>:<cursor there>`; a page is empty only at the walk's end. The client
   * checks only the `<partition>:` part: a cursor whose partition is not one of the queue's
   * throws a `RangeError` before anything is sent (but `EMQ.WIDTH`, when the width is not
   * known); the cursor there is the server's to check (`EmqCursorError`). A walk's start
   * (`'0'`) reads the width afresh (`EMQ.WIDTH`); its later pages go by the width known.
   * @param {'pending' | 'active' | 'scheduled' | 'dead' | 'waiting'} set
   * @param {{cursor?: string, count?: number, withPayloads?: boolean}} [options]
   */
  async jobs(set, options = {}) {
    const start = options.cursor ?? '0';
    const parts = start === '0' ? await this.#currentPartitions() : await this.partitions();
    if (parts.length > 0) {
      const page = await walk(parts, start, async (part, cursor) => {
        const { cursor: next, jobs } = await part.#jobsPage(set, { ...options, cursor });
        return { cursor: next, rows: jobs };
      });
      return { cursor: page.cursor, jobs: page.rows };
    }
    return this.#jobsPage(set, options);
  }

  /**
   * One page of `EMQ.JOBS` of this queue's own name.
   * @param {'pending' | 'active' | 'scheduled' | 'dead' | 'waiting'} set
   * @param {{cursor?: string, count?: number, withPayloads?: boolean}} options
   */
  async #jobsPage(set, options) {
    const args = ['EMQ.JOBS', this.name, set, 'CURSOR', options.cursor ?? '0'];
    if (options.count !== undefined) args.push('COUNT', String(options.count));
    if (options.withPayloads) args.push('WITHPAYLOADS');
    const [cursor, rows] = await this.send(args, true);
    const jobs = rows.map((/** @type {any[]} */ r) => {
      /** @type {Record<string, any>} */
      const job = { id: r[0], score: r[1], attempts: r[2] };
      if (options.withPayloads) Object.assign(job, { payload: r[3], error: r[4] });
      return job;
    });
    return { cursor: String(cursor), jobs };
  }

  /**
   * One page of the queue's named groups (`EMQ.GROUPS`), the largest backlog first: pass the
   * reply's cursor back for the next; `'0'` at the end. Each group's `ready` and `active` jobs,
   * its `concurrency` in effect (its own or the queue's default; null), `paused` (0 or 1),
   * `paused-until` (unix ms, or null), `held` (0 or 1) and, with group rates, `rate`,
   * `rate-per` and `rate-used`. A group whose backlog changes between two pages may come twice,
   * or not at all, in one walk. A partitioned queue's walk takes its partitions in turn, as
   * `jobs` does (the largest backlog first within each; the width read afresh at its start;
   * the `<partition>:` part of a cursor checked by the client, the rest, a number, by the
   * server: an `ERR` reply).
   * @param {{cursor?: string, count?: number}} [options]
   */
  async groups(options = {}) {
    const start = options.cursor ?? '0';
    const parts = start === '0' ? await this.#currentPartitions() : await this.partitions();
    if (parts.length > 0) {
      const page = await walk(parts, start, async (part, cursor) => {
        const { cursor: next, groups } = await part.#groupsPage({ ...options, cursor });
        return { cursor: next, rows: groups };
      });
      return { cursor: page.cursor, groups: page.rows };
    }
    return this.#groupsPage(options);
  }

  /**
   * One page of `EMQ.GROUPS` of this queue's own name.
   * @param {{cursor?: string, count?: number}} options
   */
  async #groupsPage(options) {
    const args = ['EMQ.GROUPS', this.name, 'CURSOR', options.cursor ?? '0'];
    if (options.count !== undefined) args.push('COUNT', String(options.count));
    const [cursor, found] = await this.send(args, true);
    return { cursor: String(cursor), groups: found.map(pairs) };
  }

  /**
   * A parent's children and how each ended (`EMQ.CHILDREN`, every page), keyed
   * `<queue>:<id>` (an id has no `:`, so the last one splits the key): `status` is `waiting`,
   * `acked`, `dead` or `cancelled`, `data` the result (acked) or the error text, as text.
   * @param {string} id
   */
  async children(id) {
    const home = await this.locate(id);
    if (home !== this) return home.children(id);
    /** @type {Map<string, {queue: string, id: string, status: string, data: string | null}>} */
    const out = new Map();
    let cursor = '0';
    do {
      const [next, rows] = await this.send(['EMQ.CHILDREN', this.name, id, 'CURSOR', cursor, 'COUNT', String(CHILDREN_PAGE)], true);
      cursor = String(next);
      for (const [queue, child, status, data] of rows) {
        out.set(`${queue}:${child}`, { queue: String(queue), id: String(child), status: String(status), data: data ?? null });
      }
    } while (cursor !== '0');
    return out;
  }

  // ---- flows ----

  /**
   * Enqueues a tree of jobs, top down, each node's children its children in the flow; a node
   * without `queue` is this queue's. Ids missing are minted and written into the tree first,
   * so calling again with the same tree (after a failure, say) enqueues the same jobs once.
   * @param {import('./flow.js').FlowNode} tree
   */
  flow(tree) {
    return flow(this, tree);
  }

  /**
   * Jobs that run one after another, in the order given (each the child of the next); their
   * ids, in that order (also written into the jobs).
   * @param {import('./flow.js').FlowNode[]} jobs
   */
  chain(jobs) {
    return chain(this, jobs);
  }

  /**
   * Jobs and a callback job, `onComplete`, that runs once all of them have finished, whether
   * acked or dead (each its child with `ON-FAIL IGNORE`); its id and theirs.
   * @param {import('./flow.js').FlowNode[]} jobs
   * @param {{onComplete: import('./flow.js').FlowNode}} options
   */
  batch(jobs, options) {
    return batch(this, jobs, options);
  }

  // ---- operating ----

  /** Removes a pending, scheduled or waiting job, a waiting parent with the unstarted
   * children of its flow (`cancelFlow`); or ends a running job's attempt: it goes to dead with
   * the error `cancelled` (its row's `cancelled` is that attempt's token), its worker's signal is
   * aborted with an `EmqCancelledError` at its next renewal, and its outcome is refused; it can be
   * requeued. Whether the job went. */
  async cancel(id) {
    return (await this.cancelFlow(id)) > 0;
  }

  /**
   * Removes a pending, scheduled or waiting job; a waiting parent with the children of its flow
   * that have not started, in any slot (cancel.js); or ends a running job's attempt, as
   * `cancel` does: how many jobs went, 0 when the job was not there to cancel.
   * @param {string} id
   */
  async cancelFlow(id) {
    return cancelFlow(await this.locate(id), id);
  }

  /**
   * `cancelFlow` only while the job has not started (`EMQ.CANCEL ... UNSTARTED`): a running job
   * is left to run (0). It finishes an `EmqCancelIncomplete`'s children.
   * @param {string} id
   */
  async cancelUnstarted(id) {
    return cancelFlow(await this.locate(id), id, true);
  }

  /** Moves a dead job back to pending, its attempts reset; whether it was dead. */
  async requeue(id) {
    return (await (await this.locate(id)).call('EMQ.REQUEUE', id)) === 1;
  }

  /** Moves up to `count` (the server's default: 1,000) of the oldest dead jobs back (of each
   * partition of a partitioned queue); how many. */
  async requeueDead(options = {}) {
    const parts = await this.partitions();
    if (parts.length > 0) return sum(await Promise.all(parts.map((p) => p.requeueDead(options))));
    const extra = options.count === undefined ? [] : ['COUNT', options.count];
    return Number(await this.call('EMQ.REQUEUE', 'DEAD', ...extra));
  }

  /**
   * Deletes the jobs of a set, `count` a call (each call bounded in the server), until a call
   * deletes fewer, or as many calls as the set's size when it began takes (so jobs that keep
   * coming cannot hold it in the loop); how many in all.
   * @param {'pending' | 'scheduled' | 'dead'} set
   */
  async purge(set, options = {}) {
    const parts = await this.partitions();
    if (parts.length > 0) return sum(await Promise.all(parts.map((p) => p.purge(set, options))));
    const count = options.count ?? PURGE_COUNT;
    if (!Number.isInteger(count) || count < 1) throw new RangeError(`a purge deletes at least 1 job a call, not ${String(count)}`);
    const size = Number((await this.stats())[set]) || 0;
    const rounds = Math.ceil(size / count) + 1;
    let total = 0;
    for (let round = 0; round < rounds; round++) {
      const n = Number(await this.call('EMQ.PURGE', set, 'COUNT', String(count)));
      total += n;
      if (n < count) break;
    }
    return total;
  }

  /** Stops the queue's claims (every partition's); false when it was paused already. */
  async pause() {
    const parts = await this.partitions();
    if (parts.length > 0) return (await Promise.all(parts.map((p) => p.pause()))).some(Boolean);
    return (await this.call('EMQ.PAUSE')) === 1;
  }

  /** Lets claims take jobs again (every partition's); false when it was not paused. */
  async resume() {
    const parts = await this.partitions();
    if (parts.length > 0) return (await Promise.all(parts.map((p) => p.resume()))).some(Boolean);
    return (await this.call('EMQ.RESUME')) === 1;
  }

  /**
   * `EMQ.LIMIT`: sets the limits given (null removes one; `off` removes them all); with none,
   * reports them. `timeout` (ms) is the default limit on one attempt of the queue's jobs that
   * have none of their own, for attempts claimed after. `groupConcurrency` and `groupRate`
   * claims every `groupPer` ms are each group's, for the groups without limits of their own.
   * The limits and their use. A partitioned queue's `concurrency` and `rate` are split over
   * its partitions (partition i gets ⌊L/n⌋, plus one for i < L mod n; a limit below n is
   * refused), the rest set on each; the partitions' limits and use added up as `stats` does.
   * @param {{concurrency?: number | null, rate?: number | null, per?: number, timeout?: number | null, off?: boolean,
   *   groupConcurrency?: number | null, groupRate?: number | null, groupPer?: number}} [options]
   */
  async limit(options = {}) {
    const parts = await this.partitions();
    if (parts.length > 0) {
      const shares = splitLimits(options, parts.length);
      return sumStats(await Promise.all(parts.map((p, i) => p.limit({ ...options, ...shares[i] }))));
    }
    const args = options.off ? ['OFF'] : [];
    args.push(...countOption('CONCURRENCY', options.concurrency));
    args.push(...rateOption('RATE', options.rate, options.per, 'per'));
    if (options.timeout === null) args.push('TIMEOUT', 'OFF');
    else if (options.timeout !== undefined) args.push('TIMEOUT', ms(options.timeout, 'timeout'));
    args.push(...countOption('GROUP-CONCURRENCY', options.groupConcurrency));
    args.push(...rateOption('GROUP-RATE', options.groupRate, options.groupPer, 'groupPer'));
    return pairs(await this.call('EMQ.LIMIT', ...args));
  }

  /**
   * `EMQ.LIMIT <queue> GROUP <group>`: sets the group's own limits given, over the queue's
   * defaults (`concurrency` of its jobs active at once; `rate` claims of its jobs every `per`
   * ms), null removes one; with none, reports. The group's limits and their use: `active`,
   * `ready`, its own `concurrency`, the queue's `group-concurrency`, `held` (1 while its limit
   * holds it back) and, with group rates, `rate`, `rate-per`, `rate-used`, `group-rate`,
   * `group-rate-per`.
   * @param {string} group
   * @param {{concurrency?: number | null, rate?: number | null, per?: number}} [options]
   */
  async groupLimit(group, options = {}) {
    const home = await this.locate(group);
    if (home !== this) return home.groupLimit(group, options);
    const args = ['GROUP', group, ...countOption('CONCURRENCY', options.concurrency)];
    args.push(...rateOption('RATE', options.rate, options.per, 'per'));
    return pairs(await this.call('EMQ.LIMIT', ...args));
  }

  /**
   * Stops claims taking the group's jobs (it keeps them, and takes enqueues), for `ms` (the
   * server resumes it then) or until `resumeGroup`; false when it was paused already.
   * @param {string} group
   * @param {{ms?: number}} [options]
   */
  async pauseGroup(group, options = {}) {
    const home = await this.locate(group);
    if (home !== this) return home.pauseGroup(group, options);
    const extra = options.ms === undefined ? [] : ['FOR', ms(options.ms, 'ms')];
    return (await this.call('EMQ.PAUSE', 'GROUP', group, ...extra)) === 1;
  }

  /**
   * Lets claims take the group's jobs again; false when it was not paused.
   * @param {string} group
   */
  async resumeGroup(group) {
    const home = await this.locate(group);
    if (home !== this) return home.resumeGroup(group);
    return (await this.call('EMQ.RESUME', 'GROUP', group)) === 1;
  }

  /**
   * A repeating schedule: `spec` (a cron expression, UTC) or `every` ms; its next firing (unix ms).
   * A partitioned queue's is kept by the partition its name routes to, and fires into it: the
   * width is asked once when it is not known, and a refusal that names another width
   * (`EMQSPANNED`: a stale width, or 0 learned before the queue was spanned) is learned and the
   * schedule sent again, at most `MAX_REROUTES` times, as an enqueue is (`routed`).
   * @param {string} name
   * @param {unknown} payload
   * @param {{spec?: string, every?: number, priority?: number}} options
   */
  async cron(name, payload, options) {
    if ((options.spec === undefined) === (options.every === undefined)) throw new TypeError('give spec or every');
    const when = options.spec !== undefined ? [options.spec] : ['EVERY', ms(options.every, 'every')];
    const extra = options.priority === undefined ? [] : ['PRIORITY', String(options.priority)];
    await this.routingWidth();
    return Number(await routed(this, name, (home) => home.call('EMQ.CRON', name, ...when, encode(payload), ...extra)));
  }

  /** Removes a schedule (a partitioned queue's, from the partition its name routes to by the
   * width read afresh, `EMQ.WIDTH`); whether there was one.
   * @param {string} name */
  async uncron(name) {
    await knowWidth(this);
    return (await this.queueFor(name).call('EMQ.UNCRON', name)) === 1;
  }

  /** Every schedule of the queue, by name, its UTF-8 bytes (`EMQ.CRONS`; a partitioned
   * queue's, every partition's of the width read afresh, `EMQ.WIDTH`). */
  async crons() {
    const parts = await this.#currentPartitions();
    if (parts.length > 0) {
      const all = (await Promise.all(parts.map((p) => p.#schedules()))).flat();
      // By the names' UTF-8 bytes, as the server orders one queue's (and the other clients
      // theirs), not by UTF-16 code units as `<` compares strings.
      return all.sort((a, b) => Buffer.compare(Buffer.from(String(a.name)), Buffer.from(String(b.name))));
    }
    return this.#schedules();
  }

  /** `EMQ.CRONS` of this queue's own name. */
  async #schedules() {
    const reply = await this.send(['EMQ.CRONS', this.name], true);
    return reply.map(pairs);
  }

  /** Turns the queue's event stream on (capped near `maxlen` entries; each partition's, of a
   * partitioned queue); whether it changed. */
  async enableEvents(options = {}) {
    const parts = await this.partitions();
    if (parts.length > 0) return (await Promise.all(parts.map((p) => p.enableEvents(options)))).some(Boolean);
    const extra = options.maxlen === undefined ? [] : ['MAXLEN', options.maxlen];
    return (await this.call('EMQ.EVENTS', 'ON', ...extra)) === 1;
  }

  /** Turns the queue's event stream off (the stream stays; each partition's); whether it
   * changed. */
  async disableEvents() {
    const parts = await this.partitions();
    if (parts.length > 0) return (await Promise.all(parts.map((p) => p.disableEvents()))).some(Boolean);
    return (await this.call('EMQ.EVENTS', 'OFF')) === 1;
  }

  /**
   * The queue's events as they come (`XREAD BLOCK` on a connection of its own), from `from`
   * (a stream id; default: the newest entry when the reading starts) until the loop breaks or
   * `signal` aborts. A partitioned queue's events are in its partitions' streams, each read
   * through its Queue (`partitions()`): its own name's is refused with a `RangeError`.
   * @param {{from?: string, block?: number, count?: number, signal?: AbortSignal}} [options]
   */
  async *events(options = {}) {
    if ((await this.routingWidth()) > 0) throw new RangeError(`queue ${this.name} is partitioned: read each partition's events`);
    yield* readEvents(this, options);
  }
}

/**
 * `<word> <n>`, `<word> OFF` for null, nothing when not given.
 * @param {string} word
 * @param {number | null | undefined} n
 */
function countOption(word, n) {
  if (n === undefined) return [];
  return [word, n === null ? 'OFF' : String(n)];
}

/**
 * `<word> <n> PER <ms>`, `<word> OFF` for null, nothing when not given; `name` is the window's
 * option, which a rate needs.
 * @param {string} word
 * @param {number | null | undefined} n
 * @param {number | undefined} per
 * @param {string} name
 */
function rateOption(word, n, per, name) {
  if (n === undefined) return [];
  if (n === null) return [word, 'OFF'];
  if (per === undefined) throw new TypeError(`a rate needs its window, ${name} (ms)`);
  return [word, String(n), 'PER', ms(per, name)];
}

/** The sum of some counts. @param {number[]} counts */
function sum(counts) {
  return counts.reduce((n, c) => n + c, 0);
}

/** An argument for the wire: node-redis takes strings and buffers only. */
function arg(value) {
  return typeof value === 'string' || value instanceof Uint8Array ? value : String(value);
}
