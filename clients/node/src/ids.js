// Branded ids minted by the client, in the module's own layout (docs/protocol.md §2): `JOB`
// and 11 base62 digits of a 63-bit value, the milliseconds since 2024-01-01 in the high bits,
// so ids sort as they were minted. A producer that mints its ids can retry an enqueue with the
// same id, which the server makes idempotent. The same scheme as the Python and Rust clients.
import { randomInt } from 'node:crypto';

const ALPHABET = '0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz';
const EPOCH_MS = 1_704_067_200_000n;
const LOW_BITS = 22n; // the module's node (10) and sequence (12) bits
const MAX_VALUE = (1n << 63n) - 1n;

let last = 0n;

/** `kind` (three upper-case letters) and `value` as the 14-byte wire form. */
export function encode(kind, value) {
  if (!/^[A-Z]{3}$/.test(kind) || value < 0n || value > MAX_VALUE) {
    throw new RangeError('a branded id is 3 upper-case letters and a value below 2^63');
  }
  let digits = '';
  for (let i = 0; i < 11; i++) {
    digits = ALPHABET[Number(value % 62n)] + digits;
    value /= 62n;
  }
  return kind + digits;
}

/** A fresh `JOB` id: the time, then random low bits; always above the last one minted here. */
export function mint() {
  let ms = BigInt(Date.now()) - EPOCH_MS;
  if (ms < 0n) ms = 0n;
  let value = (ms << LOW_BITS) | BigInt(randomInt(2 ** 22));
  if (value <= last) value = last + 1n;
  last = value;
  return encode('JOB', value);
}
