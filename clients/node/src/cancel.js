// Cancelling a job with the rest of its flow (docs/flows.md, "Cancelling"). `EMQ.CANCEL` of a
// waiting parent cancels the children that have not started only where the module reaches them
// (the same server; on a cluster, the same slot): children in other slots would run on, and
// their hand-overs find no parent. So the client reads the parent's tree first, on the primaries
// (`EMQ.CHILDREN`, paged, and `EMQ.JOB` of each unfinished child, each job once), cancels the
// parent, then sends `EMQ.CANCEL` for each unstarted child read, top down, below each one gone.
import { pairs } from './codec.js';
import { isErrorReply } from './errors.js';

/** Most unfinished children of one parent a cancel takes, in `EMQ.CHILDREN`'s order (the module's bound). */
export const CANCEL_CHILDREN = 1000;
/** Most levels of children below the cancelled job the client reads. */
export const CANCEL_DEPTH = 8;
/** Most jobs one cancel reads (`EMQ.JOB`) in the tree: a job with several parents is read once,
 * and a tree larger than this has its jobs past it left to run. */
export const CANCEL_READS = 10_000;
/** A child in one of these states has not started: a cancel removes it. */
const UNSTARTED = new Set(['pending', 'scheduled', 'waiting']);
/** Children one `EMQ.CHILDREN` page carries. */
const PAGE = '1000';

/**
 * @typedef {import('./queue.js').Queue} Queue
 * @typedef {{queue: Queue, id: string, parent: number}} Unstarted a child that had not
 *   started when the tree was read, and its parent's place in the tree (-1: the job cancelled)
 */

/** A cancel that failed after its job went: the children not yet cancelled (`remaining`, each
 * `{queue, id}`, top down: the caller may cancel them one by one), how many jobs went before
 * (`cancelled`, the job itself counted), and the failure as `cause`. */
export class EmqCancelIncomplete extends Error {
  /**
   * @param {number} cancelled
   * @param {Array<{queue: string, id: string}>} remaining
   * @param {unknown} cause
   */
  constructor(cancelled, remaining, cause) {
    super(`the cancel stopped after ${cancelled} job(s), ${remaining.length} child(ren) not cancelled: ${String(cause)}`, { cause });
    this.name = 'EmqCancelIncomplete';
    this.cancelled = cancelled;
    this.remaining = remaining;
  }
}

/**
 * Cancels `id` of `queue` and the unstarted children of its flow: how many jobs went (0 when
 * the job itself was not pending, scheduled, waiting or running, and then nothing else is; a
 * running job's attempt ends, the job dead with the error `cancelled`). A child
 * counts when its `EMQ.CANCEL` answered 1, or answered 0 and its row is gone (the module
 * cancelled it with its parent: on one server every child, on a cluster those in the parent's
 * slot). A child the user may not read or cancel (`NOPERM`) is left as the module leaves it.
 * An error after the job went is `EmqCancelIncomplete`. With `unstarted`, only a job that has
 * not started goes (`EMQ.CANCEL ... UNSTARTED`: a running one is left to run, 0).
 * @param {Queue} queue
 * @param {string} id
 * @param {boolean} [unstarted]
 */
export async function cancelFlow(queue, id, unstarted = false) {
  /** @type {Unstarted[]} */
  const tree = [];
  await readTree(queue, id, -1, 1, tree, new Set([`${queue.name}:${id}`]));
  const only = unstarted ? ['UNSTARTED'] : [];
  if ((await queue.send(['EMQ.CANCEL', queue.name, id, ...only])) !== 1) return 0;
  return 1 + (await cancelTree(tree));
}

/**
 * Adds to `tree` the children of `id` that have not started, each followed by its own while
 * `depth` is within `CANCEL_DEPTH`, each job once (`seen`) and no more than `CANCEL_READS`.
 * A child's read refused (`NOPERM`) leaves it out; the job cancelled's own read must go through.
 * @param {Queue} queue
 * @param {string} id
 * @param {number} parent
 * @param {number} depth
 * @param {Unstarted[]} tree
 * @param {Set<string>} seen
 */
async function readTree(queue, id, parent, depth, tree, seen) {
  const waiting = await waitingChildren(queue, id, parent >= 0);
  for (const [name, child] of waiting) {
    if (seen.size > CANCEL_READS) return;
    const key = `${name}:${child}`;
    if (seen.has(key)) continue;
    seen.add(key);
    const childQueue = queue.sibling(name);
    let row;
    try {
      row = await childQueue.send(['EMQ.JOB', name, child]);
    } catch (e) {
      if (refused(e)) continue;
      throw e;
    }
    const state = row ? String(pairs(row).state) : undefined;
    if (state === undefined || !UNSTARTED.has(state)) continue;
    tree.push({ queue: childQueue, id: child, parent });
    if (state === 'waiting' && depth < CANCEL_DEPTH) await readTree(childQueue, child, tree.length - 1, depth + 1, tree, seen);
  }
}

/**
 * The ids of `id`'s unfinished children (`[queue, id]`), page by page from the primary, up to
 * `CANCEL_CHILDREN` in scan order; none when `lenient` and the read is refused.
 * @param {Queue} queue
 * @param {string} id
 * @param {boolean} lenient
 * @returns {Promise<Array<[string, string]>>}
 */
async function waitingChildren(queue, id, lenient) {
  /** @type {Array<[string, string]>} */
  const waiting = [];
  let cursor = '0';
  do {
    let page;
    try {
      page = await queue.send(['EMQ.CHILDREN', queue.name, id, 'CURSOR', cursor, 'COUNT', PAGE]);
    } catch (e) {
      if (lenient && refused(e)) return waiting;
      throw e;
    }
    const [next, rows] = page;
    cursor = String(next);
    for (const [childQueue, child, status] of rows) {
      if (String(status) !== 'waiting') continue;
      waiting.push([String(childQueue), String(child)]);
      if (waiting.length === CANCEL_CHILDREN) return waiting;
    }
  } while (cursor !== '0');
  return waiting;
}

/**
 * After the job went: `EMQ.CANCEL` of each child read whose parent went, top down; how many
 * went. An error other than `NOPERM` is `EmqCancelIncomplete` with the children left.
 * @param {Unstarted[]} tree
 * @returns {Promise<number>}
 */
async function cancelTree(tree) {
  /** @type {boolean[]} */
  const went = [];
  let gone = 0;
  for (const [i, child] of tree.entries()) {
    went.push(false);
    if (child.parent >= 0 && !went[child.parent]) continue; // it started since: its own run on
    try {
      // A child that started since runs on: only one that has not started goes.
      let removed = (await child.queue.call('EMQ.CANCEL', child.id, 'UNSTARTED')) === 1;
      // Where the module reached it, it cancelled it already, unless it started since.
      if (!removed) removed = (await child.queue.send(['EMQ.JOB', child.queue.name, child.id])) === null;
      went[i] = removed;
      if (removed) gone++;
    } catch (e) {
      if (refused(e)) continue; // the module too skips a child it may not write
      throw new EmqCancelIncomplete(1 + gone, remaining(tree, went, i), e);
    }
  }
  return gone;
}

/**
 * The children from `from` on that a cancel stopped at `from` leaves: each whose parent is the
 * job cancelled, went, or is itself left.
 * @param {Unstarted[]} tree
 * @param {boolean[]} went
 * @param {number} from
 */
function remaining(tree, went, from) {
  /** @type {Set<number>} */
  const left = new Set();
  for (let j = from; j < tree.length; j++) {
    const { parent } = tree[j];
    if (parent < 0 || (parent < from && went[parent]) || left.has(parent)) left.add(j);
  }
  return [...left].map((j) => ({ queue: tree[j].queue.name, id: tree[j].id }));
}

/** Whether `error` is the server refusing the user the keys or the command (`NOPERM`). */
function refused(/** @type {unknown} */ error) {
  if (!(error instanceof Error)) return false;
  const reply = isErrorReply(error) ? error : error.cause;
  return reply instanceof Error && /^NOPERM/.test(reply.message);
}
