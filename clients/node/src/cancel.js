// Cancelling a job with the rest of its flow (docs/flows.md, "Cancelling"). `EMQ.CANCEL` of a
// waiting parent cancels the children that have not started only where the module reaches them
// (the same server; on a cluster, the same slot): children in other slots would run on, and
// their hand-overs find no parent. So the client reads the parent's tree first (`EMQ.CHILDREN`,
// paged, and `EMQ.JOB` of each unfinished child), cancels the parent, then each unstarted child
// in another slot on its own queue, and below each child cancelled, its own, bounded as the
// module is: 1,000 children a parent, 8 levels.
import { queueSlot } from './slot.js';

/** Most unfinished children of one parent a cancel takes (the module's bound). */
export const CANCEL_CHILDREN = 1000;
/** Most levels of children below the cancelled job (the module's bound). */
export const CANCEL_DEPTH = 8;
/** A child in one of these states has not started: a cancel removes it. */
const UNSTARTED = new Set(['pending', 'scheduled', 'waiting']);
/** Children one `EMQ.CHILDREN` page carries. */
const PAGE = '1000';

/**
 * @typedef {import('./queue.js').Queue} Queue
 * @typedef {{queue: Queue, id: string, inReach: boolean, below: Unstarted[]}} Unstarted a child
 *   that had not started when its parent's tree was read: whether the module reaches it from
 *   its parent (the same slot), and its own unstarted children
 */

/**
 * Cancels `id` of `queue` and the unstarted children of its flow: how many jobs went (0 when
 * the job itself was not pending, scheduled or waiting, and then nothing else is). A child
 * counts when the client's `EMQ.CANCEL` removed it, or when its row is gone after its parent's
 * (the module cancelled it in reach).
 * @param {Queue} queue
 * @param {string} id
 */
export async function cancelFlow(queue, id) {
  const below = await unstarted(queue, id, 1);
  if ((await queue.call('EMQ.CANCEL', id)) !== 1) return 0;
  return 1 + (await cancelBelow(below, new Set()));
}

/**
 * The children of `id` that have not started, at most `CANCEL_CHILDREN`, each with its own
 * below it while `depth` is within `CANCEL_DEPTH` (a job that is no parent has none).
 * @param {Queue} queue
 * @param {string} id
 * @param {number} depth
 * @returns {Promise<Unstarted[]>}
 */
async function unstarted(queue, id, depth) {
  if (depth > CANCEL_DEPTH) return [];
  /** @type {Array<[string, string]>} */
  const waiting = [];
  let cursor = '0';
  do {
    const [next, rows] = await queue.send(['EMQ.CHILDREN', queue.name, id, 'CURSOR', cursor, 'COUNT', PAGE], true);
    cursor = String(next);
    for (const [childQueue, child, status] of rows) if (String(status) === 'waiting') waiting.push([String(childQueue), String(child)]);
  } while (cursor !== '0' && waiting.length < CANCEL_CHILDREN);
  /** @type {Unstarted[]} */
  const found = [];
  for (const [name, child] of waiting.slice(0, CANCEL_CHILDREN)) {
    const childQueue = queue.sibling(name);
    const state = (await childQueue.job(child))?.state;
    if (!UNSTARTED.has(state)) continue;
    const below = state === 'waiting' ? await unstarted(childQueue, child, depth + 1) : [];
    found.push({ queue: childQueue, id: child, inReach: queueSlot(name) === queueSlot(queue.name), below });
  }
  return found;
}

/**
 * After their parent went: each child in another slot cancelled here, each in reach looked up
 * (the module cancelled it with its parent unless it started since), and below each one gone,
 * its own; how many went (a child of two parents counted once).
 * @param {Unstarted[]} children
 * @param {Set<string>} seen
 * @returns {Promise<number>}
 */
async function cancelBelow(children, seen) {
  let gone = 0;
  for (const child of children) {
    const key = `${child.queue.name}:${child.id}`;
    if (seen.has(key)) continue;
    seen.add(key);
    let removed = !child.inReach && (await child.queue.call('EMQ.CANCEL', child.id)) === 1;
    // On a single server every child is in reach: the module took it already.
    if (!removed) removed = (await child.queue.job(child.id)) === null;
    if (removed) gone += 1 + (await cancelBelow(child.below, seen));
  }
  return gone;
}
