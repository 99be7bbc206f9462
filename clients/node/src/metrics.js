// A queue's metrics as the server keeps them (`EMQ.METRICS`, docs/observability.md): a count of
// each event, the wait, run and end-to-end latency histograms, and the age of the first pending
// job. `Queue.metrics()` sends the command; this parses its reply, and adds a partitioned
// queue's partitions' up.
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

/**
 * Two histograms of the same buckets added up, bucket by bucket (a partitioned queue's, over its
 * partitions); where their buckets differ, the one with more counted (the console's
 * `waits::plus`).
 * @param {import('../index.js').Histogram} a
 * @param {import('../index.js').Histogram} b
 * @returns {import('../index.js').Histogram}
 */
export function plusHistogram(a, b) {
  const alike = a.buckets.length === b.buckets.length && a.buckets.every(([le], i) => le === b.buckets[i][0]);
  if (!alike) return a.count >= b.count ? a : b;
  return {
    count: a.count + b.count,
    sumMs: a.sumMs + b.sumMs,
    buckets: a.buckets.map(([le, n], i) => [le, n + b.buckets[i][1]]),
  };
}

/**
 * A partitioned queue's metrics from its partitions' (in order, at least one): each event's
 * count summed, each histogram summed bucket by bucket (`plusHistogram`: where a partition's
 * bucket bounds differ, the histogram with more counted is kept), the oldest pending job's
 * wait the greatest of theirs (null when none has a job pending), and `enabled` only when
 * every partition's is.
 * @param {import('../index.js').Metrics[]} parts
 * @returns {import('../index.js').Metrics}
 */
export function sumMetrics(parts) {
  /** @type {Record<string, number>} */
  const events = {};
  /** @type {Record<string, import('../index.js').Histogram>} */
  const run = {};
  for (const part of parts) {
    for (const [event, n] of Object.entries(part.events)) events[event] = (Object.hasOwn(events, event) ? events[event] : 0) + n;
    for (const [end, h] of Object.entries(part.run)) run[end] = Object.hasOwn(run, end) ? plusHistogram(run[end], h) : h;
  }
  const oldest = parts.map((p) => p.oldestPendingMs).filter((ms) => ms !== null);
  return {
    enabled: parts.every((p) => p.enabled),
    events,
    wait: parts.map((p) => p.wait).reduce(plusHistogram),
    run,
    endToEnd: parts.map((p) => p.endToEnd).reduce(plusHistogram),
    oldestPendingMs: oldest.length === 0 ? null : Math.max(...oldest),
  };
}
