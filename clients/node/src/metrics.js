// A queue's metrics as the server keeps them (`EMQ.METRICS`, docs/observability.md): a count of
// each event, the wait, run and end-to-end latency histograms, and the age of the first pending
// job. `Queue.metrics()` sends the command; this parses its reply.
import { pairs } from './codec.js';

/** A count in a reply, as a number. */
const number = (v) => Number(v ?? 0);

/**
 * One histogram: `count`, `sumMs` and `buckets`, `[le, count]` pairs (how many took at most
 * `le` ms; `le` null for any time), cumulative, ascending.
 * @returns {import('../index.js').Histogram}
 */
export function parseHistogram(reply) {
  const fields = pairs(reply ?? []);
  const buckets = (fields.buckets ?? []).map(([le, n]) => [typeof le === 'number' ? le : null, number(n)]);
  return { count: number(fields.count), sumMs: number(fields['sum-ms']), buckets };
}

/**
 * The least bucket bound (ms) that holds at least the fraction `q` of a histogram's durations:
 * an upper bound of the `q` quantile; null past the last bound or with none counted.
 * @param {import('../index.js').Histogram} h
 * @param {number} q
 */
export function quantileBound(h, q) {
  if (h.count === 0) return null;
  const want = Math.ceil(q * h.count);
  const found = h.buckets.find(([, n]) => n >= want);
  return found ? found[0] : null;
}

/** `EMQ.METRICS`' reply. @returns {import('../index.js').Metrics} */
export function parseMetrics(reply) {
  const fields = pairs(reply);
  const events = Object.fromEntries(Object.entries(pairs(fields.events ?? [])).map(([k, v]) => [k, number(v)]));
  const run = Object.fromEntries(Object.entries(pairs(fields.run ?? [])).map(([k, v]) => [k, parseHistogram(v)]));
  const oldest = fields['oldest-pending-ms'];
  return {
    enabled: fields.enabled === undefined ? true : Number(fields.enabled) === 1,
    events,
    wait: parseHistogram(fields.wait),
    run,
    endToEnd: parseHistogram(fields['end-to-end']),
    oldestPendingMs: oldest === null || oldest === undefined ? null : number(oldest),
  };
}
