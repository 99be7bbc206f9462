// Hash slots as a cluster computes them (docs/protocol.md §3): CRC16-XMODEM of a key's hash
// tag, mod 16384. A child whose parent's queue sits in another slot needs `EMQ.ADOPT` first.

/** The slots of a cluster. */
export const SLOTS = 16384;

const TABLE = (() => {
  const table = new Uint16Array(256);
  for (let byte = 0; byte < 256; byte++) {
    let crc = byte << 8;
    for (let bit = 0; bit < 8; bit++) crc = crc & 0x8000 ? (crc << 1) ^ 0x1021 : crc << 1;
    table[byte] = crc & 0xffff;
  }
  return table;
})();

/** CRC16-XMODEM (polynomial 0x1021, init 0) of `bytes`. */
export function crc16(bytes) {
  let crc = 0;
  for (const byte of bytes) crc = ((crc << 8) & 0xffff) ^ TABLE[((crc >> 8) ^ byte) & 0xff];
  return crc;
}

/** The bytes a key's slot is computed from: between the first `{` and the first `}` after it
 * when those are not empty, else the whole key. */
export function hashtag(key) {
  const bytes = Buffer.from(key);
  const open = bytes.indexOf(0x7b);
  if (open < 0) return bytes;
  const close = bytes.indexOf(0x7d, open + 1);
  return close > open + 1 ? bytes.subarray(open + 1, close) : bytes;
}

/** `CLUSTER KEYSLOT key`. */
export function slot(key) {
  return crc16(hashtag(key)) % SLOTS;
}

/** The slot of every key of `queue` (its keys share the hash tag `{<queue>}`). */
export function queueSlot(queue) {
  return slot(`emq:{${queue}}:pending`);
}
