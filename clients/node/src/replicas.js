// How a write waits for replicas (the worker's `waitReplicas`): the commands and `WAIT n
// timeout` sent together on one connection, the one of the node that takes the write (on a
// cluster client, the primary of the queue's slot, not wherever the cluster would send a
// command without a key), so `WAIT` counts the replicas that confirmed that write.
import { isCluster, routingKey } from './connection.js';
import { queueSlot } from './slot.js';
import { moved } from './retry.js';

/**
 * The worker's `waitReplicas` and `waitTimeout` (ms) checked: the count and `WAIT`'s timeout
 * (at least 1 ms: `WAIT n 0` would block for ever).
 * @param {number | undefined} replicas
 * @param {number | undefined} timeout
 */
export function waitSettings(replicas = 0, timeout = 1000) {
  if (!Number.isInteger(replicas) || replicas < 0) throw new RangeError(`waitReplicas is 0 (no wait) or more, not ${String(replicas)}`);
  if (!(timeout > 0)) throw new RangeError(`waitTimeout is more than 0 ms, not ${String(timeout)}`);
  return { replicas, timeout: Math.max(1, Math.round(timeout)) };
}

/**
 * `commands` and then `WAIT replicas timeout`, written together on the connection of the node
 * that serves `queue`: each command's reply or error in its place, and how many replicas `WAIT`
 * reported (0 when `WAIT` itself failed). A reply `MOVED`/`ASK` (the slot went elsewhere) has a
 * cluster client read its map again, so the next try finds the slot's new node.
 * @param {any} client
 * @param {string} queue
 * @param {Array<Array<string | Buffer>>} commands
 * @param {{replicas: number, timeout: number}} wait
 * @param {{returnBuffers?: boolean}} [options]
 * @returns {Promise<{replies: Array<{value?: any, error?: unknown}>, confirmed: number}>}
 */
export async function sendWaited(client, queue, commands, wait, options = undefined) {
  const node = slotNode(client, queue);
  if (node === undefined) {
    await remap(client, queue);
    throw new SlotUnknownError(`no node known for the slot of queue ${queue} yet`);
  }
  // On a connection of their own (a blocked `WAIT` holds it up to its timeout, and every other
  // command of this node's shared connection would wait behind it), sent in one turn of the
  // event loop: node-redis writes them in this order on that socket.
  const settled = await node.executeIsolated((/** @type {any} */ isolated) => {
    const sent = commands.map((args) => isolated.sendCommand(args, options));
    sent.push(isolated.sendCommand(['WAIT', String(wait.replicas), String(wait.timeout)]));
    return Promise.allSettled(sent);
  });
  const replies = settled.map((/** @type {PromiseSettledResult<any>} */ s) => (s.status === 'fulfilled' ? { value: s.value } : { error: s.reason }));
  const waited = /** @type {{value?: any, error?: unknown}} */ (replies.pop());
  if (isCluster(client) && replies.some((r) => moved(r.error))) await remap(client, queue);
  return { replies, confirmed: waited.error === undefined ? Number(waited.value) : 0 };
}

/** A cluster client's map holds no primary for a queue's slot (being read again): transient. */
export class SlotUnknownError extends Error {}

/** The node client `queue`'s writes go to: the client itself, or on a cluster the primary of
 * the queue's slot, undefined while the cluster's map holds none. node-redis 4.5.1 makes each
 * primary's client when it reads the map, so one found is there to use. */
function slotNode(client, queue) {
  if (!isCluster(client)) return client;
  try {
    return client.getSlotMaster(queueSlot(queue))?.client;
  } catch {
    return undefined; // a slot the map does not cover
  }
}


/** Has the cluster client read its map of the slots again: a keyed read through it, which its
 * own redirection handling follows to the slot's new owner. `EMQ.WIDTH`, which a worker's user
 * may send (docs/configuration.md, "A worker's least ACL"), where a plain read may be refused. */
export async function remap(client, queue) {
  await client.sendCommand(routingKey(queue), false, ['EMQ.WIDTH', queue]).catch(() => {});
}
