// A claimed job as its handler sees it (its children's outcomes too, when it is a parent), and
// how a handler asks for a retry at a time of its own.
import { MAX_DELAY } from './flow.js';
import { parseTraceparent } from './headers.js';

export class Job {
  /** The Queue it was claimed from, which reads its children. */
  #source;

  /**
   * @param {string} queue
   * @param {string} id
   * @param {Uint8Array} bytes the payload, the bytes enqueued
   * @param {number} attempt this attempt's lease token: 1 for the first (docs/commands.md)
   * @param {AbortSignal} signal fired when the job is cancelled while it runs, its attempt runs
   *   past its deadline, its lease is lost, or the worker closes past its timeout
   * @param {{children(id: string): Promise<Map<string, any>>}} [source] the Queue it was claimed from
   * @param {Record<string, string>} [headers] the headers it was enqueued with
   */
  constructor(queue, id, bytes, attempt, signal, source = undefined, headers = {}) {
    this.queue = queue;
    this.id = id;
    /** The headers it was enqueued with (the trace context among them): empty for none. */
    this.headers = headers;
    /** The payload as enqueued, byte for byte. */
    this.bytes = bytes;
    /** The payload read as UTF-8 text. */
    this.payload = Buffer.from(bytes).toString('utf8');
    this.attempt = attempt;
    this.signal = signal;
    /** What the next renewal sends as the row's `progress` (`EMQ.RENEW ... PROGRESS`). */
    this.progress = undefined;
    /** Set when a renewal or the settle answered `EMQLEASE`: the outcome is not sent. */
    this.leaseLost = false;
    /** Set when a renewal or the settle answered `EMQCANCELLED`: the job was cancelled while it
     * ran (it is dead, error `cancelled`); `signal` is aborted, and no outcome is sent. */
    this.cancelled = false;
    /** Set when a renewal answered `EMQTIMEOUT`: this attempt ran past its deadline (the server
     * fails it with the error `timeout`: a retry, or dead); `signal` is aborted, and no outcome
     * is sent. */
    this.timedOut = false;
    this.#source = source;
  }

  /** The trace context its headers carry (W3C `traceparent`): its trace id, the producer's span
   * id and whether it is sampled; null for none. */
  get trace() {
    return parseTraceparent(this.headers.traceparent);
  }

  /** The payload parsed as JSON (what `Queue.enqueue` wrote for a value not a string). */
  get data() {
    return JSON.parse(this.payload);
  }

  /** A parent's children and how each ended, keyed `<queue>:<id>` (`Queue.children`). */
  children() {
    if (!this.#source) return Promise.reject(new Error('this job was not claimed from a queue'));
    return this.#source.children(this.id);
  }
}

/** Thrown by a handler: fail this attempt, to be retried after `after` ms (`RETRY-IN`). */
export class Retry extends Error {
  /**
   * @param {number} after
   * @param {string} [reason]
   */
  constructor(after, reason = 'retry') {
    // What the server would refuse is refused here, where the handler sees it.
    if (!(typeof after === 'number' && after >= 0 && after <= MAX_DELAY)) {
      throw new RangeError(`a retry waits 0 to ${MAX_DELAY} ms, not ${String(after)}`);
    }
    super(reason);
    this.name = 'Retry';
    this.after = after;
  }
}
