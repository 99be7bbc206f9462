// A partitioned queue's partitions, as the module names and routes them: partition i of n is
// the queue `<queue>~<i>-<j>`, j the least number that puts its slot in the i-th of n shares of
// the slot range; a job goes to partition FNV-1a-32(its group, else its id) mod n.
// testing/vectors/ holds every client to the same. No call uses it yet.
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

/** The partition, of `width` (0 reads as 1), of a job with this group, or this id where it
 * has none.
 * @param {number} width
 * @param {string} key
 * @returns {number} */
export function route(width, key) {
  return fnv1a32(Buffer.from(key)) % Math.max(width, 1);
}

/** The slots partition `index` of `width` owns, as [first, past the last]: from
 * ceil(index * 16384 / width) up to the next index's; null for a width out of 1–1024 or an
 * index past it.
 * @param {number} index
 * @param {number} width
 * @returns {[number, number] | null} */
export function share(index, width) {
  if (!Number.isInteger(index) || !Number.isInteger(width)) return null;
  if (width < 1 || width > MAX_PARTITIONS || index < 0 || index >= width) return null;
  return [Math.ceil((index * SLOTS) / width), Math.ceil(((index + 1) * SLOTS) / width)];
}

/** The name of partition `index` of `queue`'s `width`; null for a name that is no queue name
 * (1–112 bytes of printable ASCII without braces), a width out of 1–1024 or an index past it.
 * @param {string} queue
 * @param {number} index
 * @param {number} width
 * @returns {string | null} */
export function partitionName(queue, index, width) {
  const raw = Buffer.from(queue);
  if (raw.length < 1 || raw.length > MAX_NAME_LEN) return null;
  if (raw.some((b) => b < 0x21 || b > 0x7e || b === 0x7b || b === 0x7d)) return null;
  const bounds = share(index, width);
  if (!bounds) return null;
  const [low, high] = bounds;
  for (let j = 0; j < 1_000_000; j++) {
    const name = `${queue}~${index}-${j}`;
    const at = slot(name);
    if (at >= low && at < high) return name;
  }
  return null;
}
