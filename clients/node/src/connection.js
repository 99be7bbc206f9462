// One call to the server for a queue, on a node-redis v4 client (`createClient`) or cluster
// client (`createCluster`): the cluster client routes it by a key of the queue, so every call
// of a queue goes to the primary holding its slot.

/** Whether `client` is node-redis's cluster client. */
export function isCluster(client) {
  return typeof client.getSlotMaster === 'function';
}

/** The key a cluster routes the queue's calls by (any key of the queue: one hash tag). */
export function routingKey(queue) {
  return `emq:{${queue}}:pending`;
}

/**
 * Sends `args` (the command and its arguments) for `queue`'s slot; the raw reply.
 * @param {any} client
 * @param {string} queue
 * @param {Array<string | Uint8Array>} args
 * @param {boolean} [readonly]
 * @param {{returnBuffers?: boolean}} [options] node-redis's command options: `returnBuffers`
 *   answers bulk strings as bytes (a claim's payloads, which need not be text)
 */
export function send(client, queue, args, readonly = false, options = undefined) {
  if (isCluster(client)) return client.sendCommand(routingKey(queue), readonly, args, options);
  return client.sendCommand(args, options);
}
