// A partitioned queue from the producer's side (docs/cluster.md, "A queue bigger than one
// primary"): marking its partitions (EMQ.SPAN / EMQ.UNSPAN), sending a batch of jobs to the
// partitions they route to, and what the operator reads and sets over every partition (the sums
// of their counts, a queue-wide limit split into shares). The Queue keeps the width it knows.
import { pairs } from './codec.js';
import { EmqSpannedError, isErrorReply } from './errors.js';
import { MAX_PARTITIONS, partitionName } from './partition.js';

/** Most times one call routes again after a refusal that names another width. */
export const MAX_REROUTES = 2;
/** The counts a partitioned queue's stats add up: its sets', its named groups', the rate's use. */
const SUMMED = ['pending', 'active', 'scheduled', 'dead', 'waiting', 'groups', 'rate-used'];
/** The limits a partitioned queue's stats and limits add up (null while no partition has one). */
const LIMITS = ['concurrency', 'rate'];

/**
 * @typedef {import('./queue.js').Queue} Queue
 * @typedef {{id: string, args: Array<string | Buffer>, at: number}} Row a job of a batch: its
 *   key (the id: `EMQ.MENQUEUE` takes no group), its arguments, its place in the caller's order
 */

/**
 * `EMQ.WIDTH`'s reply read: the partitions of the queue (0 for an ordinary one) and, for a
 * partition, its queue and place.
 * @param {unknown} reply
 * @returns {{width: number, of: string | null, index: number | null}}
 */
export function readWidth(reply) {
  const row = pairs(reply);
  return {
    width: Number(row.width ?? 0),
    of: row.of === null || row.of === undefined ? null : String(row.of),
    index: row.index === null || row.index === undefined ? null : Number(row.index),
  };
}

/**
 * Whether `error`, an `EMQ.WIDTH`'s, means the server will not tell this user the width: the
 * command refused to the user (`NOPERM User <u> has no permissions to run the 'emq.width'
 * command`, or Redis's "this user has no permissions to run ...") or unknown to the server.
 * Any other refusal, a `NOPERM` for a key the user may not access among them, is a real error.
 * @param {unknown} error
 */
export function widthUntold(error) {
  const reply = isErrorReply(error) ? error : /** @type {{cause?: unknown}} */ (error)?.cause;
  if (!(reply instanceof Error)) return false;
  return /^ERR unknown command/i.test(reply.message) || (/^NOPERM/i.test(reply.message) && /has no permissions to run/i.test(reply.message));
}

/**
 * Has `queue` learn its width from `EMQ.WIDTH`. Where the server will not tell (`widthUntold`:
 * a server without the command, or a user not allowed it), the width the Queue knows already
 * (learned from an `EMQSPANNED` refusal) stands, else 0: such a user has ordinary queues only,
 * till a refusal tells it otherwise.
 * @param {Queue} queue
 */
export async function knowWidth(queue) {
  try {
    await queue.width();
  } catch (e) {
    if (!widthUntold(e)) throw e;
    queue.knownWidth ??= 0;
  }
}

/**
 * Whether `name` is a partition's of a queue of `width` partitions (`<queue>~<i>-<j>`, as
 * `partitionName` names it): such a queue takes the jobs that route to it and refuses the rest,
 * which it does not send on.
 * @param {string} name
 * @param {number} width
 */
export function isPartition(name, width) {
  const parts = /^(.+)~(\d+)-\d+$/.exec(name);
  return parts !== null && partitionName(parts[1], Number(parts[2]), width) === name;
}

/**
 * `send(target)` on the Queue that `key` (a job's group, or else its id) routes to; a refusal
 * that names another width (`EMQSPANNED`) is learned and the call routed again, at most
 * `MAX_REROUTES` times. A refusal stands when the width learned would route the job where it
 * was refused (the name of a retired partition, which refuses every job with width 0) or the
 * queue's name is a partition's (which sends no job on). With `exact`, the width is read again
 * (`EMQ.WIDTH`) after a refusal rather than taken from it, so the next try goes straight where
 * the job will be taken (a retired partition's `EMQSPANNED 0` would send it to the queue's own
 * name first): a child's parents are told that queue before its enqueue (`EMQ.ADOPT`).
 * @template T
 * @param {Queue} queue
 * @param {string} key
 * @param {(target: Queue) => Promise<T>} send
 * @param {boolean} [exact]
 * @returns {Promise<T>}
 */
export async function routed(queue, key, send, exact = false) {
  for (let reroutes = 0; ; reroutes++) {
    const target = queue.queueFor(key);
    try {
      return await send(target);
    } catch (e) {
      if (!(e instanceof EmqSpannedError) || reroutes >= MAX_REROUTES || isPartition(queue.name, e.width)) throw e;
      if (exact) await knowWidth(queue);
      else queue.knownWidth = e.width;
      if (queue.queueFor(key).name === target.name) throw e;
    }
  }
}

/** Throws unless `width` is a partitioned queue's number of partitions. */
export function checkWidth(width) {
  if (!Number.isInteger(width) || width < 1 || width > MAX_PARTITIONS) {
    throw new RangeError(`a queue has 1 to ${MAX_PARTITIONS} partitions, not ${String(width)}`);
  }
}

/**
 * Marks `queue` partitioned over `width`: each partition on its own node, then the queue's own
 * name; whether anything changed. A queue the server would refuse (`refused`) is refused
 * before any partition is marked.
 * @param {Queue} queue
 * @param {number} width
 */
export async function span(queue, width) {
  checkWidth(width);
  const parts = queue.partitionQueues(width);
  // Asked first, so a span the queue refuses marks no partition: then the queue's own mark is
  // sent, for the server's refusal (`EmqSpanError`), before any other.
  const [found, counts] = await Promise.all([queue.send(['EMQ.WIDTH', queue.name], true), queue.send(['EMQ.STATS', queue.name], true)]);
  if (refused(readWidth(found), pairs(counts), width)) await queue.send(['EMQ.SPAN', queue.name, String(width)]);
  const marked = await Promise.all(parts.map((p, i) => p.send(['EMQ.SPAN', p.name, String(width), 'OF', queue.name, 'INDEX', String(i)])));
  const own = await queue.send(['EMQ.SPAN', queue.name, String(width)]);
  queue.knownWidth = width;
  return own === 1 || marked.some((m) => m === 1);
}

/**
 * Whether the server will refuse to span a queue over `width`, from its `EMQ.WIDTH` and
 * `EMQ.STATS`: a partition, a queue spanned over another width, or one that holds jobs (an
 * ordinary queue or a retired partition that holds none may be spanned; one spanned over
 * `width` already is left as it is).
 * @param {{width: number, of: string | null}} found
 * @param {Record<string, any>} counts
 * @param {number} width
 */
export function refused(found, counts, width) {
  if (found.of === null && found.width === width) return false;
  const held = ['pending', 'active', 'scheduled', 'dead', 'waiting'].some((set) => Number(counts[set]) > 0);
  return found.width > 0 || held;
}

/**
 * Makes `queue` an ordinary queue again: each partition, then its own name; whether anything
 * changed. A partition that holds jobs refuses (`EmqSpanError`) and leaves the queue spanned,
 * so the call can be made again once it is drained (with the queue's own name first, a second
 * call would find no width to unmark the rest by). A partition's own name is unmarked alone.
 * @param {Queue} queue
 */
export async function unspan(queue) {
  const { width, of } = readWidth(await queue.send(['EMQ.WIDTH', queue.name], true));
  let changed = false;
  if (of === null && width > 0) {
    for (const p of queue.partitionQueues(width)) changed = (await p.send(['EMQ.UNSPAN', p.name])) === 1 || changed;
  }
  changed = (await queue.send(['EMQ.UNSPAN', queue.name])) === 1 || changed;
  queue.knownWidth = 0;
  return changed;
}

/**
 * Sends `rows` with `EMQ.MENQUEUE`s of at most `chunk` jobs, each to the partition its jobs
 * route to by the width `queue` knows; a refusal that names another width (`EMQSPANNED`) is
 * learned, and the jobs of that call and those not sent yet are routed again (at most
 * `MAX_REROUTES` times a call; a refusal stands as `routed` has it). A batch that was taken
 * stays where it went: its ids went there. With the queue's `waitReplicas`, each call waits:
 * the jobs of the calls fewer replicas confirmed, the fewest confirmations and the count asked
 * (null when every call was confirmed, or none waited).
 * @param {Queue} queue
 * @param {Iterable<Row>} rows
 * @param {number} chunk
 * @returns {Promise<{ids: string[], fewest: number, wanted: number} | null>}
 */
export async function enqueueRows(queue, rows, chunk) {
  /** @type {Map<Queue, Row[]>} */
  const waiting = new Map();
  /** @type {{ids: string[], fewest: number, wanted: number} | null} */
  let short = null;
  let reroutes = 0;
  /** @param {Row} row */
  const add = async (row) => {
    const target = queue.queueFor(row.id);
    const rowsThere = waiting.get(target) ?? /** @type {Row[]} */ (waiting.set(target, []).get(target));
    rowsThere.push(row);
    if (rowsThere.length >= chunk) await send(target);
  };
  /** @param {Queue} target */
  const send = async (target) => {
    const batch = /** @type {Row[]} */ (waiting.get(target));
    waiting.delete(target);
    try {
      const { confirmed, short: unconfirmed } = await target.write('EMQ.MENQUEUE', ...batch.flatMap((row) => row.args));
      if (unconfirmed && confirmed !== null) {
        short ??= { ids: [], fewest: confirmed, wanted: Number(target.wait?.replicas) };
        short.ids.push(...batch.map((row) => row.id));
        short.fewest = Math.min(short.fewest, confirmed);
      }
    } catch (e) {
      if (!(e instanceof EmqSpannedError) || ++reroutes > MAX_REROUTES || isPartition(queue.name, e.width)) throw e;
      queue.knownWidth = e.width;
      // The same call again, to where it was refused (a retired partition's own name): it stands.
      if (batch.every((row) => queue.queueFor(row.id).name === target.name)) throw e;
      // Nothing of a refused batch was written: it and every row not sent go again, in order.
      const again = [...batch, ...[...waiting.values()].flat()].sort((a, b) => a.at - b.at);
      waiting.clear();
      for (const row of again) await add(row);
    }
  };
  for (const row of rows) await add(row);
  while (waiting.size > 0) await send(/** @type {Queue} */ (waiting.keys().next().value));
  return short;
}

/**
 * The partitions' stats (`EMQ.STATS`) or limits (`EMQ.LIMIT`) added up, each with the fields
 * its reply has: each set's count, the named groups, the limits set and the rate's use, and
 * `paused` 1 while any partition is; the other fields are partition 0's; and each partition's
 * own, in order, as `partitions`.
 * @param {Array<Record<string, any>>} parts
 */
export function sumStats(parts) {
  /** @type {Record<string, any>} */
  const total = { ...parts[0] };
  for (const field of SUMMED) if (field in total) total[field] = parts.reduce((n, p) => n + (Number(p[field]) || 0), 0);
  for (const field of LIMITS) if (field in total) total[field] = sumLimit(parts, field);
  if ('paused' in total) total.paused = parts.some((p) => Number(p.paused) === 1) ? 1 : 0;
  total.partitions = parts;
  return total;
}

/** The sum of a limit over the partitions; null when none has it. */
function sumLimit(parts, field) {
  const set = parts.map((p) => p[field]).filter((v) => v !== null && v !== undefined);
  return set.length === 0 ? null : set.reduce((n, v) => n + Number(v), 0);
}

/**
 * Partition `index`'s share of a queue-wide limit `total` over `width` partitions: ⌊total/width⌋,
 * plus one for the first `total mod width`, so the shares add up to `total`.
 * @param {number} total
 * @param {number} index
 * @param {number} width
 */
export function limitShare(total, index, width) {
  return Math.floor(total / width) + (index < total % width ? 1 : 0);
}

/**
 * The `EMQ.LIMIT` arguments of each of `width` partitions for a queue-wide `concurrency` and
 * `rate`: each its share. A limit below the width is refused: some partition would have none.
 * @param {{concurrency?: number | null, rate?: number | null}} options
 * @param {number} width
 * @returns {Array<{concurrency?: number | null, rate?: number | null}>}
 */
export function splitLimits(options, width) {
  for (const name of /** @type {const} */ (['concurrency', 'rate'])) {
    const limit = options[name];
    if (limit === undefined || limit === null) continue;
    if (!Number.isInteger(limit) || limit < width) {
      throw new RangeError(`a ${name} limit of ${String(limit)} cannot be split over ${width} partitions: give at least ${width}`);
    }
  }
  return Array.from({ length: width }, (_, i) => {
    /** @type {{concurrency?: number | null, rate?: number | null}} */
    const share = {};
    for (const name of /** @type {const} */ (['concurrency', 'rate'])) {
      const limit = options[name];
      if (limit !== undefined) share[name] = limit === null ? null : limitShare(limit, i, width);
    }
    return share;
  });
}
