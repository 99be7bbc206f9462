// A partitioned queue's partitions (docs/cluster.md), as the module names and routes them:
// partition i of n is the queue `<queue>~<i>-<j>`, j the least number that puts its slot in the
// i-th of n equal shares of the slot range; a job goes to partition FNV-1a-32(its group, else
// its id) mod n. testing/vectors/partitions.tsv holds every client to the same.
import { SLOTS, slot } from './slot.js';

/** Most partitions a queue may have. */
export const MAX_PARTITIONS = 1024;

/** Longest name of a partitioned queue, in bytes. */
export const MAX_NAME_LEN = 112;

/** FNV-1a, 32 bits, of `bytes`.
 * @param {Uint8Array} bytes
 * @returns {number} */
export function fnv1a32(bytes) {
  let hash = 0x811c9dc5;
  for (const byte of bytes) hash = Math.imul(hash ^ byte, 0x01000193) >>> 0;
  return hash;
}

/** The partition, of `width`, of a job with this group, or this id where it has none.
 * @param {number} width
 * @param {string} key
 * @returns {number} */
export function route(width, key) {
  return fnv1a32(Buffer.from(key)) % Math.max(width, 1);
}

/** The name of partition `index` of `queue`'s `width`; null for a name over MAX_NAME_LEN
 * bytes, a width out of 1–1024 or an index past it.
 * @param {string} queue
 * @param {number} index
 * @param {number} width
 * @returns {string | null} */
export function partitionName(queue, index, width) {
  if (Buffer.byteLength(queue) > MAX_NAME_LEN || !(width >= 1 && width <= MAX_PARTITIONS)) return null;
  if (!(index >= 0 && index < width)) return null;
  const low = Math.ceil((index * SLOTS) / width);
  const high = Math.ceil(((index + 1) * SLOTS) / width);
  for (let j = 0; j < 1_000_000; j++) {
    const name = `${queue}~${index}-${j}`;
    const at = slot(name);
    if (at >= low && at < high) return name;
  }
  return null;
}
