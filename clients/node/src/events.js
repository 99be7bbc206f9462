// A queue's event stream (`emq:{<queue>}:events`, docs/commands.md's EMQ.EVENTS) as an async
// iterator: `XREAD BLOCK` on a duplicate of the queue's client, since a blocked read holds its
// connection, closed when the loop ends.
import { isCluster, routingKey } from './connection.js';
import { pairs } from './codec.js';

/** The stream key of `queue`. */
export function eventsKey(queue) {
  return `emq:{${queue}}:events`;
}

/**
 * @param {{client: any, name: string}} queue
 * @param {{from?: string, block?: number, count?: number, signal?: AbortSignal}} options
 */
export async function* readEvents(queue, options) {
  const key = eventsKey(queue.name);
  const block = String(Math.max(1, Math.round(options.block ?? 1000)));
  const count = String(options.count ?? 100);
  const reader = queue.client.duplicate();
  await reader.connect();
  /** @param {string[]} args */
  const send = (args) => (isCluster(reader) ? reader.sendCommand(routingKey(queue.name), true, args) : reader.sendCommand(args));
  try {
    // `$` read once as the id it stands for (the newest entry's; 0-0 for none): an entry
    // appended between two reads that waited for nothing is read too.
    let last = options.from ?? (await send(['XREVRANGE', key, '+', '-', 'COUNT', '1']))[0]?.[0] ?? '0-0';
    while (!options.signal?.aborted) {
      const reply = await send(['XREAD', 'COUNT', count, 'BLOCK', block, 'STREAMS', key, last]);
      if (!reply) continue;
      for (const [, entries] of reply) {
        for (const [id, fields] of entries) {
          last = id;
          const f = pairs(fields);
          yield {
            streamId: id,
            event: f.event,
            id: f.id ?? null,
            attempt: f.attempt === undefined ? null : Number(f.attempt),
          };
        }
      }
    }
  } finally {
    await reader.disconnect();
  }
}
