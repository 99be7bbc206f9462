// A worker's delivery of its queue's outbox (flows-protocol.md, "What the clients do" 2): the
// hand-overs of finished children whose parents the module could not reach in the same step
// (another slot of a cluster, or keys the user may not write). Each entry is handed over on the
// parent's node (`EMQ.HANDOVER`, idempotent by child), then removed on the child's
// (`EMQ.DELIVERED`, `ORPHAN` when the parent is gone); an error on either leaves the entry for
// the next sweep, so a worker killed between the two delays the parent and never loses it.
import { isErrorReply } from './errors.js';
import { sleep, transient } from './retry.js';

/** The longest wait between two sweeps, ms; a sweep that delivered something is followed at once. */
export const SWEEP_EVERY = 1000;
/** Entries one `EMQ.OUTBOX` page carries. */
export const SWEEP_COUNT = 100;
/** Entries come as bytes: a child's result need not be text, and it is handed over as it is. */
const BYTES = { returnBuffers: true };

/**
 * @typedef {{queue: string, id: string, parentQueue: string, parentId: string, outcome: string,
 *   policy: string, reply: string}} Handover
 * @typedef {import('./queue.js').Queue} Queue
 */

/**
 * Sweeps `queue`'s outbox until `signal` aborts: a sweep at least every `SWEEP_EVERY` ms, and
 * again at once after one that delivered entries. Ends quietly on a server without flows.
 * @param {Queue} queue
 * @param {AbortSignal} signal
 * @param {(entry: Handover) => void} delivered each entry handed over and removed
 * @param {(error: unknown) => void} report an error no caller receives
 */
export async function sweepLoop(queue, signal, delivered, report) {
  while (!signal.aborted) {
    let count = 0;
    try {
      count = await sweep(queue, delivered, report);
    } catch (e) {
      if (unknownCommand(e)) return;
      if (!transient(e)) report(e);
    }
    if (count === 0) await sleep(SWEEP_EVERY, signal);
  }
}

/**
 * One pass over the outbox, page by page, each page's entries delivered together; how many
 * entries it delivered. An entry that fails stays (its error to `report`).
 * @param {Queue} queue
 * @param {(entry: Handover) => void} delivered
 * @param {(error: unknown) => void} report
 */
export async function sweep(queue, delivered, report) {
  /** @type {Map<string, Queue>} */
  const parents = new Map();
  let done = 0;
  let cursor = '0';
  do {
    const args = ['EMQ.OUTBOX', queue.name, 'CURSOR', cursor, 'COUNT', String(SWEEP_COUNT)];
    const [next, entries] = await queue.send(args, true, BYTES);
    cursor = String(next);
    await Promise.all(
      entries.map(async (/** @type {any[]} */ raw) => {
        const [id, parentQueue, parentId, outcome, policy] = raw.slice(0, 5).map(String);
        const parent = parents.get(parentQueue) ?? parents.set(parentQueue, queue.sibling(parentQueue)).get(parentQueue);
        try {
          const answer = String(await parent.send(['EMQ.HANDOVER', parentQueue, parentId, queue.name, id, outcome, policy, raw[5] ?? '']));
          const orphan = answer === 'orphan' ? ['ORPHAN'] : [];
          await queue.send(['EMQ.DELIVERED', queue.name, id, parentQueue, parentId, ...orphan]);
          done++;
          delivered({ queue: queue.name, id, parentQueue, parentId, outcome, policy, reply: answer });
        } catch (e) {
          if (!transient(e)) report(e);
        }
      }),
    );
  } while (cursor !== '0');
  return done;
}

/** Whether `error` is a server's answer that it has no such command (a module without flows). */
function unknownCommand(error) {
  return isErrorReply(error) && /^ERR unknown command/i.test(/** @type {Error} */ (error).message);
}
