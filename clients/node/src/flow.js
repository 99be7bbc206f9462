// The flow builders (flows-protocol.md, "Builders"): a tree of jobs, a chain, a batch with its
// callback. Every missing id is minted (and every missing queue named) in the spec itself
// before anything is sent, so the same spec given again, after a failure, say, enqueues the
// same jobs, each once. The tree goes in top down, a level at a time: a child's enqueue finds
// its parent there, named by the queue it went to (a partitioned queue's partition: the one its
// group, or else its id, routes to).
import { encode, ms } from './codec.js';
import { MAX_CHILDREN, checkOnFail } from './family.js';
import { mint } from './ids.js';

/** Enqueues of one level of a tree in flight at once. */
export const LEVEL_CHUNK = 1000;

/**
 * @typedef {{queue?: string, payload: unknown, id?: string, onFail?: 'fail' | 'ignore',
 *   priority?: number, delay?: number, at?: number | Date, timeout?: number, group?: string,
 *   children?: FlowNode[]}} FlowNode
 * @typedef {import('./queue.js').Queue} Queue
 */

/**
 * Enqueues `tree` (ids and queues filled in first); the tree.
 * @param {Queue} queue the queue of a node that names none
 * @param {FlowNode} tree
 */
export async function flow(queue, tree) {
  prepare(queue.name, tree);
  /** The queue each node went to (of a partitioned queue, its partition), which its children
   * name as their parent's. @type {Map<FlowNode, string>} */
  const placed = new Map();
  /** @type {Array<[FlowNode, FlowNode | null]>} */
  let level = [[tree, null]];
  while (level.length > 0) {
    for (let i = 0; i < level.length; i += LEVEL_CHUNK) {
      await Promise.all(level.slice(i, i + LEVEL_CHUNK).map(([node, parent]) => enqueueNode(queue.sibling(String(node.queue)), node, parent, placed)));
    }
    level = level.flatMap(([node]) => (node.children ?? []).map((child) => /** @type {[FlowNode, FlowNode]} */ ([child, node])));
  }
  return tree;
}

/**
 * Jobs run in the order given: each the child of the next. Their ids, in order.
 * @param {Queue} queue
 * @param {FlowNode[]} jobs
 */
export async function chain(queue, jobs) {
  if (!Array.isArray(jobs) || jobs.length === 0) throw new TypeError('a chain is a non-empty array of jobs');
  for (const job of jobs) {
    if (job.children?.length) throw new TypeError('a job of a chain has no children of its own');
    name(queue.name, job);
  }
  /** @type {FlowNode | null} */
  let tree = null;
  for (const job of jobs) tree = { ...job, children: tree ? [tree] : [] };
  await flow(queue, /** @type {FlowNode} */ (tree));
  return jobs.map((job) => String(job.id));
}

/**
 * `jobs`, and `onComplete`, their parent, which runs once every one of them has finished,
 * acked or dead (each its child with `ON-FAIL IGNORE`). The callback's id and theirs.
 * @param {Queue} queue
 * @param {FlowNode[]} jobs
 * @param {{onComplete: FlowNode}} options
 */
export async function batch(queue, jobs, options) {
  const callback = options?.onComplete;
  if (!callback) throw new TypeError('a batch needs its onComplete job');
  if (!Array.isArray(jobs) || jobs.length === 0) throw new TypeError('a batch is a non-empty array of jobs');
  for (const job of [callback, ...jobs]) name(queue.name, job);
  const children = jobs.map((job) => ({ ...job, onFail: /** @type {const} */ ('ignore') }));
  await flow(queue, { ...callback, children });
  return { id: String(callback.id), ids: jobs.map((job) => String(job.id)) };
}

/** Names `node` (its queue and id, where missing) in place. */
function name(queueName, node) {
  if (node === null || typeof node !== 'object') throw new TypeError('a flow node is an object {queue?, payload, id?, onFail?, group?, children?}');
  if (node.payload === undefined) throw new TypeError('a flow node needs its payload');
  // Refused before anything is sent: the server's refusal of a child would leave its parent
  // waiting for it.
  if (node.group !== undefined && !isName(node.group)) throw new TypeError(`a group is 1 to 128 printable ASCII bytes without braces, not ${JSON.stringify(node.group)}`);
  node.queue ??= queueName;
  node.id ??= mint();
}

/** Whether `group` is a name a group may have: 1 to 128 bytes of 0x21 to 0x7e, no braces. */
function isName(group) {
  return typeof group === 'string' && /^[\x21-\x7a\x7c\x7e]{1,128}$/.test(group);
}

/** The priorities a job may have, the longest delay (ms) and the latest due time (unix ms) the
 * server takes. */
export const PRIORITY_MIN = -1_000_000;
export const PRIORITY_MAX = 1_000_000;
export const MAX_DELAY = 365 * 86_400_000;
export const MAX_AT = 2 ** 53 - 1;

/** Throws what the server would refuse of a node's priority, delay, due time (`at`) or timeout. */
export function checkWhen(node) {
  if (node.delay !== undefined && node.at !== undefined) throw new TypeError('give delay or at, not both');
  if (node.priority !== undefined && !(Number.isInteger(node.priority) && node.priority >= PRIORITY_MIN && node.priority <= PRIORITY_MAX)) {
    throw new RangeError(`a priority is an integer from ${PRIORITY_MIN} to ${PRIORITY_MAX}, not ${String(node.priority)}`);
  }
  if (node.delay !== undefined && Number(ms(node.delay, 'delay')) > MAX_DELAY) throw new RangeError('a delay is at most 365 days');
  if (node.at !== undefined && Number(ms(node.at, 'at')) > MAX_AT) throw new RangeError(`at is at most ${MAX_AT} unix ms`);
  const timeout = node.timeout === undefined ? undefined : Number(ms(node.timeout, 'timeout'));
  if (timeout !== undefined && !(timeout >= 1 && timeout <= MAX_DELAY)) throw new RangeError(`a timeout is 1 ms to 365 days, not ${String(node.timeout)}`);
}

/** Checks every node and names it, before anything is sent: a node given twice, two nodes of
 * one job, too many children, a payload that cannot be encoded, an `onFail` that is not one,
 * or a priority, delay, time or timeout the server would refuse, would leave a parent waiting
 * for a child never counted. */
function prepare(queueName, tree) {
  const seen = new Set();
  const jobs = new Set();
  const stack = [tree];
  while (stack.length > 0) {
    const node = /** @type {FlowNode} */ (stack.pop());
    if (seen.has(node)) throw new TypeError('a flow node appears twice in the tree');
    seen.add(node);
    checkWhen(node);
    encode(node.payload);
    checkOnFail(node.onFail);
    name(queueName, node);
    const key = `${node.queue}:${node.id}`;
    if (jobs.has(key)) throw new TypeError(`the job ${key} appears twice in the tree`);
    jobs.add(key);
    const children = node.children ?? [];
    if (!Array.isArray(children)) throw new TypeError('children is an array of flow nodes');
    if (children.length > MAX_CHILDREN) throw new RangeError(`a job has at most ${MAX_CHILDREN} children, not ${children.length}`);
    for (const child of children) stack.push(child);
  }
}

/**
 * One node's enqueue: `CHILDREN` when it has any, `PARENT` when it is not the root, naming the
 * queue its parent went to, `GROUP` when it has one (a partitioned queue's node goes to the
 * partition its group, or else its id, routes to); the queue it went to, noted in `placed`.
 * @param {Queue} queue
 * @param {FlowNode} node
 * @param {FlowNode | null} parent
 * @param {Map<FlowNode, string>} placed
 */
async function enqueueNode(queue, node, parent, placed) {
  const children = node.children?.length ?? 0;
  const parents = parent ? [{ queue: placed.get(parent) ?? String(parent.queue), id: String(parent.id), onFail: node.onFail }] : undefined;
  const options = {
    id: node.id,
    priority: node.priority,
    delay: node.delay,
    at: node.at,
    timeout: node.timeout,
    group: node.group,
    children: children > 0 ? children : undefined,
    parents,
  };
  placed.set(node, (await queue.enqueueJob(node.payload, options, true)).queue);
}
