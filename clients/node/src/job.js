// A claimed job as its handler sees it, and how a handler asks for a retry at a time of its own.

export class Job {
  /**
   * @param {string} queue
   * @param {string} id
   * @param {Uint8Array} bytes the payload, the bytes enqueued
   * @param {number} attempt this attempt's lease token: 1 for the first (docs/commands.md)
   * @param {AbortSignal} signal fired when the lease is lost or the worker closes past its timeout
   */
  constructor(queue, id, bytes, attempt, signal) {
    this.queue = queue;
    this.id = id;
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
  }

  /** The payload parsed as JSON (what `Queue.enqueue` wrote for a value not a string). */
  get data() {
    return JSON.parse(this.payload);
  }
}

/** Thrown by a handler: fail this attempt, to be retried after `after` ms (`RETRY-IN`). */
export class Retry extends Error {
  /**
   * @param {number} after
   * @param {string} [reason]
   */
  constructor(after, reason = 'retry') {
    super(reason);
    this.name = 'Retry';
    this.after = after;
  }
}
