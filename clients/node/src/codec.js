// How values travel: payloads and results as the bytes the server keeps, and replies (RESP2
// flat arrays or RESP3 maps, as node-redis passes them on) as plain objects.

/**
 * A payload or result as a command argument: a string or bytes as they are, anything else as
 * JSON (`undefined` has no JSON form and is refused).
 * @param {unknown} value
 * @returns {string | Buffer}
 */
export function encode(value) {
  if (typeof value === 'string') return value;
  if (value instanceof Uint8Array) return Buffer.from(value.buffer, value.byteOffset, value.byteLength);
  const json = JSON.stringify(value);
  if (json === undefined) throw new TypeError(`a payload is a string, bytes or a JSON value, not ${typeof value}`);
  return json;
}

/** A map reply (a flat array under RESP2, an object or Map under RESP3) as an object. */
export function pairs(reply) {
  if (reply instanceof Map) return Object.fromEntries(reply);
  if (!Array.isArray(reply)) return { ...reply };
  /** @type {Record<string, any>} */
  const out = {};
  for (let i = 0; i + 1 < reply.length; i += 2) out[String(reply[i])] = reply[i + 1];
  return out;
}

/** A duration or time for the wire: a whole number of milliseconds. */
export function ms(value, name) {
  const n = value instanceof Date ? value.getTime() : value;
  if (typeof n !== 'number' || !Number.isFinite(n) || n < 0) {
    throw new RangeError(`${name} is a number of milliseconds, not ${String(value)}`);
  }
  return String(Math.round(n));
}
