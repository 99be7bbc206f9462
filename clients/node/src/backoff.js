// How long a failed job waits before its next attempt (`EMQ.FAIL ... RETRY-IN`), as BullMQ's
// `backoff` option spells it: a number of ms, `{type: 'fixed' | 'exponential', delay}`, or a
// function of the attempt that failed (1 for the first) and its error. A worker without one
// sends no `RETRY-IN`: the server's backoff applies, as for the other clients' workers.
/** The longest wait any backoff gives (the server's `emq.backoff-max-ms` default). */
export const MAX_BACKOFF = 3_600_000;

/**
 * @param {number | {type: 'fixed' | 'exponential', delay: number} | ((attempt: number, error: unknown) => number)} spec
 * @param {number} attempt
 * @param {unknown} error
 */
export function retryIn(spec, attempt, error) {
  let wait;
  if (typeof spec === 'function') wait = spec(attempt, error);
  else if (typeof spec === 'number') wait = spec;
  else if (spec.type === 'fixed') wait = spec.delay;
  else wait = spec.delay * 2 ** Math.max(0, Math.min(attempt - 1, 40));
  return Math.round(Math.min(MAX_BACKOFF, Math.max(0, Number(wait) || 0)));
}
