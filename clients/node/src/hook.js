// The worker's observability hook, `onEvent` (the Python and Rust workers' contract): a
// WorkerEvent for each job a claim returned, each renewal and settle of it (with the server's
// answer), each start and end of its handler, its cancel or timeout while it ran, and each step
// of a flow's hand-over from the queue's outbox, passed synchronously. A hook that throws is
// logged, never the worker's end; without one, nothing here runs.
import { hostname } from 'node:os';
import { randomInt } from 'node:crypto';
import { EmqError, isErrorReply } from './errors.js';

/** `<hostname>:<pid>:<6 random hex digits>`: unique to one worker. */
export function defaultName() {
  return `${hostname()}:${process.pid}:${randomInt(2 ** 24).toString(16).padStart(6, '0')}`;
}

/** Wall-clock Unix-epoch nanoseconds (microsecond precision), as a BigInt. */
export function nowNs() {
  return BigInt(Math.round((performance.timeOrigin + performance.now()) * 1000)) * 1000n;
}

/** `ok` with no error; `refused` for the server's answer (it did not happen); `unknown` when
 * no answer came (a lost connection: it may or may not have happened). */
export function outcomeOf(error) {
  if (error === undefined) return 'ok';
  return error instanceof EmqError || isErrorReply(error) ? 'refused' : 'unknown';
}

export class Hook {
  /**
   * @param {(event: any) => void} onEvent
   * @param {string} worker
   * @param {string} queue
   */
  constructor(onEvent, worker, queue) {
    this.onEvent = onEvent;
    this.worker = worker;
    this.queue = queue;
  }

  /**
   * @param {'claim' | 'renew' | 'settle' | 'handler_start' | 'handler_end' | 'cancelled' | 'timed_out' | 'handover' | 'delivered' | 'outbox'} kind
   * @param {{id: string, attempt: number, queue?: string}} job a hand-over's child with attempt
   *   0; for a read of the outbox, id ''. A job's `queue` (a partition of a partitioned queue)
   *   names the event's queue; the worker's otherwise
   * @param {bigint} sentNs
   * @param {{answeredNs?: bigint, error?: unknown, failure?: unknown, action?: 'ack' | 'fail',
   *   replicated?: boolean | null}} [more] `replicated`: with `waitReplicas`, whether `WAIT`
   *   reported that many replicas (for a settle or a hand-over)
   */
  emit(kind, job, sentNs, more = {}) {
    const failed = more.error !== undefined;
    const event = {
      kind,
      worker: this.worker,
      queue: job.queue ?? this.queue,
      id: job.id,
      token: job.attempt,
      sentNs,
      answeredNs: more.answeredNs ?? sentNs,
      outcome: outcomeOf(more.error),
      error: failed ? text(more.error) : more.failure === undefined ? null : text(more.failure),
      action: more.action ?? null,
      replicated: more.replicated ?? null,
    };
    try {
      this.onEvent(event);
    } catch (e) {
      console.error('echomq: the onEvent hook threw; the worker goes on:', e);
    }
  }
}

/** An error as an event's text: `Name: message`. */
function text(error) {
  return error instanceof Error ? `${error.name}: ${error.message}` : String(error);
}
