// A worker's delivery of its queue's outbox (flows-protocol.md, "What the clients do" 2): the
// hand-overs of finished children whose parents the module could not reach in the same step
// (another slot of a cluster, or keys the user may not write). Each entry is handed over on the
// parent's node (`EMQ.HANDOVER`, idempotent by child), then removed on the child's
// (`EMQ.DELIVERED`, `ORPHAN` when the parent is gone); an error on either leaves the entry for
// the next sweep, so a worker killed between the two delays the parent and never loses it.
// With the worker's `waitReplicas`, `WAIT` follows each hand-over on the parent's node, and the
// entry stays until that many of the parent's replicas confirmed it: a failover of the
// parent's primary cannot then lose a count whose entry is gone.
import { isErrorReply, translate } from './errors.js';
import { nowNs } from './hook.js';
import { sendWaited } from './replicas.js';
import { passing, sleep } from './retry.js';

/** The longest wait between two sweeps, ms; a sweep that found entries and delivered them all is
 * followed at once (more may be waiting), any other after this wait (as Python's `pause`). */
export const SWEEP_EVERY = 1000;
/** Entries one `EMQ.OUTBOX` page carries. */
export const SWEEP_COUNT = 100;
/** Entries come as bytes: a child's result need not be text, and it is handed over as it is. */
const BYTES = { returnBuffers: true };

/**
 * @typedef {{queue: string, id: string, parentQueue: string, parentId: string, outcome: string,
 *   policy: string, reply: string}} Handover
 * @typedef {import('./queue.js').Queue} Queue
 * @typedef {{hook: import('./hook.js').Hook | null, wait: {replicas: number, timeout: number} | null,
 *   delivered: (entry: Handover) => void, report: (error: unknown) => void}} Courier what a sweep
 *   tells and waits for: `onEvent`'s caller (one event a command: `handover` and `delivered` per
 *   entry, `outbox` for a page read that failed), the worker's `waitReplicas` (a hand-over is
 *   removed only once that many of the parent's replicas confirmed it), each entry delivered,
 *   and an error no caller receives
 */

/**
 * Sweeps `queue`'s outbox until `signal` aborts: a sweep at least every `SWEEP_EVERY` ms, and
 * again at once after one that found entries and delivered every one (a step that failed or
 * was left unreplicated is not tried again in a loop). Ends quietly on a server without flows.
 * @param {Queue} queue
 * @param {AbortSignal} signal
 * @param {Courier} courier
 */
export async function sweepLoop(queue, signal, courier) {
  while (!signal.aborted) {
    let swept = { found: 0, clean: false };
    try {
      swept = await sweep(queue, courier);
    } catch (e) {
      if (unknownCommand(e)) return;
      if (!passing(e)) courier.report(e);
    }
    if (!(swept.found > 0 && swept.clean)) await sleep(SWEEP_EVERY, signal);
  }
}

/**
 * One pass over the outbox, page by page, each page's entries delivered together: how many
 * entries it found, and whether it delivered them all (`clean`). An entry that fails stays (its
 * error to `report`), as does one whose hand-over fewer of the parent's replicas confirmed than
 * `waitReplicas` asks.
 * @param {Queue} queue
 * @param {Courier} courier
 */
export async function sweep(queue, courier) {
  const { hook } = courier;
  /** @type {Map<string, Queue>} */
  const parents = new Map();
  let found = 0;
  let done = 0;
  let cursor = '0';
  do {
    const args = ['EMQ.OUTBOX', queue.name, 'CURSOR', cursor, 'COUNT', String(SWEEP_COUNT)];
    const sentNs = hook ? nowNs() : 0n;
    let page;
    try {
      page = await queue.send(args, true, BYTES);
    } catch (e) {
      hook?.emit('outbox', { id: '', attempt: 0 }, sentNs, { answeredNs: nowNs(), error: e });
      throw e;
    }
    const [next, entries] = page;
    cursor = String(next);
    found += entries.length;
    await Promise.all(
      entries.map(async (/** @type {any[]} */ raw) => {
        const [id, parentQueue, parentId, outcome, policy] = raw.slice(0, 5).map(String);
        const parent = parents.get(parentQueue) ?? parents.set(parentQueue, queue.sibling(parentQueue)).get(parentQueue);
        const child = { id, attempt: 0 };
        const handedNs = hook ? nowNs() : 0n;
        const handover = ['EMQ.HANDOVER', parentQueue, parentId, queue.name, id, outcome, policy, raw[5] ?? ''];
        const taken = await handOver(parent, handover, courier.wait);
        hook?.emit('handover', child, handedNs, { answeredNs: nowNs(), error: taken.error, replicated: taken.replicated });
        if (taken.error !== undefined) {
          if (!passing(taken.error)) courier.report(taken.error);
          return;
        }
        if (taken.replicated === false) return; // left for the next sweep: a failover could lose the count
        const answer = String(taken.value);
        const orphan = answer === 'orphan' ? ['ORPHAN'] : [];
        const removedNs = hook ? nowNs() : 0n;
        try {
          await queue.send(['EMQ.DELIVERED', queue.name, id, parentQueue, parentId, ...orphan]);
          hook?.emit('delivered', child, removedNs, { answeredNs: nowNs() });
        } catch (e) {
          hook?.emit('delivered', child, removedNs, { answeredNs: nowNs(), error: e });
          if (!passing(e)) courier.report(e);
          return;
        }
        done++;
        courier.delivered({ queue: queue.name, id, parentQueue, parentId, outcome, policy, reply: answer });
      }),
    );
  } while (cursor !== '0');
  return { found, clean: done === found };
}

/**
 * `EMQ.HANDOVER` on the parent's node: its answer or error, and with `wait`, whether `WAIT`
 * there reported that many replicas (null without).
 * @param {Queue} parent
 * @param {string[]} args
 * @param {{replicas: number, timeout: number} | null} wait
 * @returns {Promise<{value?: any, error?: unknown, replicated: boolean | null}>}
 */
async function handOver(parent, args, wait) {
  if (!wait) {
    try {
      return { value: await parent.send(args), replicated: null };
    } catch (e) {
      return { error: e, replicated: null };
    }
  }
  try {
    const { replies, confirmed } = await sendWaited(parent.client, parent.name, [args], wait);
    const [reply] = replies;
    const replicated = confirmed >= wait.replicas;
    return reply.error === undefined ? { value: reply.value, replicated } : { error: translate(reply.error), replicated };
  } catch (e) {
    return { error: e, replicated: false };
  }
}

/** Whether `error` is a server's answer that it has no such command (a module without flows). */
function unknownCommand(error) {
  return isErrorReply(error) && /^ERR unknown command/i.test(/** @type {Error} */ (error).message);
}
