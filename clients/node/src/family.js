// A job's place in a flow, at its enqueue (flows-protocol.md, "What the clients do" 1): the
// `CHILDREN <n>` a parent waits for, the `PARENT <pq> <pid> [ON-FAIL ..]` of a child, and the
// `EMQ.ADOPT` a cluster needs first for a parent whose queue has another slot than the child's.
import { isCluster } from './connection.js';
import { queueSlot } from './slot.js';

/** Most children one parent waits for (`CHILDREN`). */
export const MAX_CHILDREN = 100_000;
/** Most parents one child has (`PARENT`, repeated). */
export const MAX_PARENTS = 16;
/** A child's policy for its parent when it dies or is cancelled, as the wire spells it. */
const ON_FAIL = { fail: 'FAIL', ignore: 'IGNORE' };

/**
 * The `CHILDREN` and `PARENT` arguments of an enqueue, checked before anything is sent.
 * @param {{children?: number, parents?: Array<{queue: string, id: string, group?: string, onFail?: 'fail' | 'ignore'}>}} options
 * @returns {string[]}
 */
export function familyArgs(options) {
  const args = [];
  if (options.children !== undefined) {
    const n = options.children;
    if (!Number.isInteger(n) || n < 1 || n > MAX_CHILDREN) {
      throw new RangeError(`children is a whole number of 1 to ${MAX_CHILDREN}, not ${String(n)}`);
    }
    args.push('CHILDREN', String(n));
  }
  const parents = options.parents ?? [];
  if (parents.length > MAX_PARENTS) throw new RangeError(`a job has at most ${MAX_PARENTS} parents, not ${parents.length}`);
  const seen = new Set();
  for (const parent of parents) {
    if (typeof parent?.queue !== 'string' || typeof parent.id !== 'string' || !['string', 'undefined'].includes(typeof parent.group)) {
      throw new TypeError('a parent is {queue, id, group?, onFail?}, its queue, id and group strings');
    }
    const key = `${parent.queue}:${parent.id}`;
    if (seen.has(key)) throw new TypeError(`the parent ${key} is given twice`);
    seen.add(key);
    args.push('PARENT', parent.queue, parent.id);
    if (parent.onFail !== undefined) args.push('ON-FAIL', checkOnFail(parent.onFail));
  }
  return args;
}

/** The `ON-FAIL` word of a child's `onFail` (`FAIL` when undefined); a TypeError for one that
 * is neither `'fail'` nor `'ignore'`.
 * @param {unknown} onFail
 * @returns {string} */
export function checkOnFail(onFail) {
  if (onFail === undefined) return 'FAIL';
  if (onFail === 'fail' || onFail === 'ignore') return ON_FAIL[onFail];
  throw new TypeError(`onFail is 'fail' or 'ignore', not ${String(onFail)}`);
}

/**
 * Registers child `id` of `queue` with each parent the child's own node cannot reach: on a
 * cluster, a parent whose queue's slot is not the child's (`EMQ.ADOPT` on the parent's node).
 * A server that is not a cluster reaches every parent in the enqueue itself.
 * @param {import('./queue.js').Queue} queue the child's queue
 * @param {string} id the child's id
 * @param {Array<{queue: string, id: string}>} parents
 */
export async function adopt(queue, id, parents) {
  if (!isCluster(queue.client)) return;
  const own = queueSlot(queue.name);
  const away = parents.filter((p) => queueSlot(p.queue) !== own);
  await Promise.all(away.map((p) => queue.sibling(p.queue).call('EMQ.ADOPT', p.id, queue.name, id)));
}
