// A job's headers (docs/observability.md): a small map that goes with the job to each of its
// attempts, the W3C trace context among them. The carrier is a plain object of header names to
// values, as @opentelemetry/api's `propagation.inject` and `extract` take it.

/** Most headers one job carries (the server's bound). */
export const MAX_HEADERS = 32;

/** A header key: an HTTP token of 1 to 64 bytes (the server's bound). */
const KEY = /^[A-Za-z0-9!#$%&'*+\-.^_`|~]{1,64}$/;

/**
 * `HEADERS <n> <key> <value> ...` for an enqueue, or nothing for no headers. What the server
 * would refuse throws before anything is sent: more than `MAX_HEADERS`, a key that is not 1 to
 * 64 letters, digits or ``!#$%&'*+-.^_`|~``, a value that is not a string of at most 8,192
 * bytes (UTF-8) without a line break, or more than 16,384 bytes in all.
 * @param {Record<string, string> | undefined} headers
 * @returns {string[]}
 */
export function headerArgs(headers) {
  const entries = Object.entries(headers ?? {});
  if (entries.length === 0) return [];
  if (entries.length > MAX_HEADERS) throw new RangeError(`a job carries at most ${MAX_HEADERS} headers, not ${entries.length}`);
  const args = ['HEADERS', String(entries.length)];
  let size = entries.length - 1; // the line breaks between them
  for (const [key, value] of entries) {
    if (typeof value !== 'string') throw new TypeError(`header ${key} is a string, not ${typeof value}`);
    if (!KEY.test(key)) throw new RangeError(`a header key is 1 to 64 letters, digits or !#$%&'*+-.^_\`|~, not ${JSON.stringify(key)}`);
    const bytes = Buffer.byteLength(value);
    if (bytes > 8192 || /[\r\n]/.test(value)) throw new RangeError(`header ${key}'s value is at most 8,192 bytes, with no CR or LF`);
    size += key.length + 1 + bytes;
    args.push(key, value);
  }
  if (size > 16_384) throw new RangeError("a job's headers take at most 16,384 bytes");
  return args;
}

/**
 * The headers a claim or `EMQ.JOB` replies (a flat array under RESP2, a map under RESP3) as an
 * object of strings.
 * @param {any} reply
 * @returns {Record<string, string>}
 */
export function headerMap(reply) {
  /** @type {Record<string, string>} */
  const out = {};
  const entries = reply instanceof Map ? [...reply.entries()] : Array.isArray(reply) ? pairsOf(reply) : Object.entries(reply ?? {});
  // An own property each, `__proto__` too (a plain assignment would set the prototype).
  for (const [key, value] of entries) Object.defineProperty(out, String(key), { value: String(value), enumerable: true, writable: true, configurable: true });
  return out;
}

/** @param {any[]} flat */
function pairsOf(flat) {
  const out = [];
  for (let i = 0; i + 1 < flat.length; i += 2) out.push([flat[i], flat[i + 1]]);
  return out;
}

/**
 * The caller's headers with what a queue's `inject` hook writes into a fresh carrier (the trace
 * context), the caller's winning where both name a key.
 * @param {((carrier: Record<string, string>) => void) | undefined} inject
 * @param {Record<string, string> | undefined} given
 */
export function carried(inject, given) {
  if (!inject) return given;
  /** @type {Record<string, string>} */
  const carrier = {};
  inject(carrier);
  return { ...carrier, ...given };
}

const TRACEPARENT = /^([0-9a-f]{2})-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})$/;

/**
 * A W3C `traceparent` read: its trace id, parent span id and whether it is sampled; null for
 * one that is not well formed (an all-zero id, version `ff`).
 * @param {string | undefined} value
 * @returns {{traceId: string, spanId: string, sampled: boolean} | null}
 */
export function parseTraceparent(value) {
  const m = TRACEPARENT.exec(value?.trim() ?? '');
  if (!m || m[1] === 'ff' || /^0+$/.test(m[2]) || /^0+$/.test(m[3])) return null;
  return { traceId: m[2], spanId: m[3], sampled: (parseInt(m[4], 16) & 1) === 1 };
}

/**
 * A W3C `traceparent` (version 00) for a trace id (32 hex) and span id (16 hex).
 * @param {{traceId: string, spanId: string, sampled?: boolean}} context
 */
export function formatTraceparent(context) {
  const value = `00-${context.traceId}-${context.spanId}-${context.sampled === false ? '00' : '01'}`;
  if (!parseTraceparent(value)) throw new RangeError(`not a trace context: ${value}`);
  return value;
}
