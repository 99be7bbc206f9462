// The consumer's side: `Worker` claims jobs in batches up to its free concurrency (a blocking
// `EMQ.CLAIM` on a connection of its own), runs each handler with an AbortSignal, renews the
// leases of running handlers (a job cancelled while it runs, or past its attempt's deadline,
// aborts its signal and frees its slot, with nothing sent for it), settles acknowledgements in
// batches with `EMQ.MACK` that claim the next jobs in the same call, fails a throwing handler's
// job with its stack and a backoff, delivers its queue's outbox to the parents of finished
// children (outbox.js), and closes gracefully (on SIGTERM/SIGINT too, when asked). With
// `waitReplicas`, each settle and each hand-over is followed by `WAIT` on the node that took it
// (replicas.js). A partitioned queue's partitions are claimed by one loop a primary
// (spread.js), and each job is settled, renewed and swept on the partition it came from.
import { EventEmitter, setMaxListeners } from 'node:events';
import { retryIn } from './backoff.js';
import { encode } from './codec.js';
import { isCluster, routingKey } from './connection.js';
import { EmqCancelledError, EmqLeaseError, EmqPayloadError, EmqSpannedError, EmqTimeoutError, EmqVersionError, isErrorReply, translate } from './errors.js';
import { headerMap } from './headers.js';
import { Hook, defaultName, nowNs } from './hook.js';
import { Job, Retry } from './job.js';
import { sweepLoop } from './outbox.js';
import { sendWaited, waitSettings } from './replicas.js';
import { backoff, passing, serverFull, sleep } from './retry.js';
import { isPartition, knowWidth } from './span.js';
import { Spread } from './spread.js';

/** The protocol major version this client speaks (`EMQ.VERSION` answers `echomq:<x.y.z>`). */
export const PROTOCOL_MAJOR = 2;
/** Most bytes of an error (message and stack) sent with `EMQ.FAIL`. */
export const MAX_ERROR = 4096;
/** Most acknowledgements one `EMQ.MACK` carries. */
export const SETTLE_BATCH = 100;
/** Most jobs one claim takes (the server's bound on `COUNT`). */
export const MAX_CLAIM = 1000;
/** The first wait past a lease's end before it is renewed again (see `renewAt`), ms. */
export const LATE_RENEWAL = 10;
/** Claims answer payloads as bytes: a payload need not be text. */
const BYTES = { returnBuffers: true };

/** An error's text for `EMQ.FAIL`: its stack (which names it and its message), at most
 * `MAX_ERROR` bytes, its end kept, on a character boundary. */
export function errorText(error) {
  let text;
  try {
    text = error instanceof Error ? error.stack ?? `${error.name}: ${error.message}` : String(error);
  } catch {
    // A thrown object without a string form (no prototype, a toString that throws).
    text = `a thrown ${Object.prototype.toString.call(error)} without a string form`;
  }
  const bytes = Buffer.from(text);
  if (bytes.length <= MAX_ERROR) return text;
  let start = bytes.length - MAX_ERROR;
  while (start < bytes.length && (bytes[start] & 0xc0) === 0x80) start++;
  return bytes.subarray(start).toString();
}

/** A worker's numeric option, `fallback` when not given; one that is not a finite number is
 * refused (NaN would make every timer fire at once). @param {Record<string, unknown>} options
 * @param {string} name @param {number} fallback @returns {number} */
function option(options, name, fallback) {
  const value = options[name] ?? fallback;
  if (typeof value !== 'number' || !Number.isFinite(value)) throw new TypeError(`the worker's ${name} is a finite number, not ${String(value)}`);
  return value;
}

/** Refuses a server that speaks another protocol major version than `PROTOCOL_MAJOR`. */
export function checkVersion(answer) {
  const match = /^echomq:(\d+)\./.exec(String(answer));
  if (!match || Number(match[1]) !== PROTOCOL_MAJOR) {
    throw new EmqVersionError(`the server speaks ${answer}; this client speaks echomq:${PROTOCOL_MAJOR}.x`);
  }
}

/** @typedef {import('./queue.js').Queue} Queue */
/** @typedef {{job: Job, queue: Queue, controller: AbortController, finished: boolean, late?: ReturnType<typeof setTimeout>, lateRenewals: number}} RunState
 * `queue`: the one the job was claimed from (a partition of a partitioned queue) */

export class Worker extends EventEmitter {
  /**
   * @param {import('./queue.js').Queue} queue
   * @param {(job: Job, context: {signal: AbortSignal}) => unknown} handler
   * @param {object} [options] see index.d.ts's WorkerOptions
   */
  constructor(queue, handler, options = {}) {
    super();
    this.queue = queue;
    this.handler = handler;
    this.concurrency = Math.max(1, Math.floor(option(options, 'concurrency', 4)));
    this.lease = Math.max(1, Math.round(option(options, 'lease', 30_000)));
    // At most half the lease: a job's handler is not started a lease after its claim was sent
    // (see start()), so a claim must not wait in the server for most of a lease.
    this.block = Math.max(1, Math.min(Math.round(option(options, 'block', 1000)), Math.floor(this.lease / 2)));
    this.batch = Math.min(MAX_CLAIM, Math.max(1, Math.floor(option(options, 'batch', this.concurrency))));
    this.renewEvery = Math.min(0.9, Math.max(0.05, option(options, 'renewEvery', 1 / 3)));
    /** The time between two rounds of renewals, ms. */
    this.renewMs = Math.max(1, Math.round(this.lease * this.renewEvery));
    this.shutdownTimeout = Math.max(0, option(options, 'shutdownTimeout', 30_000));
    /** The worker's own wait before a failed job's retry; null: the server's backoff. */
    this.backoff = options.backoff ?? null;
    /** Names the worker in its events. */
    this.name = options.name ?? defaultName();
    /** `onEvent`'s caller; null without one, so the jobs' way pays nothing for it. */
    this.hook = options.onEvent ? new Hook(options.onEvent, this.name, queue.name) : null;
    /** Runs each attempt's handler (`run`) inside the caller's own scope: a span of the trace the
     * job's headers carry, say. None: the handler runs as it is. */
    this.around = options.around ?? null;
    // The queue's own wait, unless the worker names one.
    const wait = waitSettings(options.waitReplicas ?? queue.wait?.replicas, options.waitTimeout ?? queue.wait?.timeout);
    /** `WAIT`'s replicas and timeout (ms) after each settle and hand-over; null for none. */
    this.wait = wait.replicas > 0 ? wait : null;
    /** What happened, for logs and tests. */
    this.counts = { acked: 0, failed: 0, retried: 0, lost: 0, cancelled: 0, timedOut: 0 };
    /** The runs counted lost: an end the server gave one, learned later, moves it (`ended()`).
     * @type {WeakSet<Job>} */
    this.countedLost = new WeakSet();
    /** The running handlers, by their job (a run of it); `late`, a renewal due when its lease
     * ends before the next round (`renewAt`), and how many came so.
     * @type {Map<Job, RunState>} */
    this.running = new Map();
    this.claimReserved = 0; // slots the claims in flight may fill
    this.mackReserved = 0; // slots the EMQ.MACK ... CLAIM in flight may fill, beyond its acks
    /** Finished handlers waiting to be acknowledged, by the queue (or partition) each came from.
     * @type {Map<Queue, Array<{state: RunState, result: unknown}>>} */
    this.acks = new Map();
    /** Each queue's settles in progress: one a queue, so a queue whose primary fails over holds
     * up no other's. @type {Map<Queue, Promise<void>>} */
    this.flushing = new Map();
    this.closing = false;
    this.closed = false;
    this.wakers = new Set();
    /** Aborted once the worker closes: cuts its backoffs short. */
    this.closer = new AbortController();
    setMaxListeners(0, this.closer.signal); // a backoff a loop waits on it
    this.claims = null;
    this.renewTimer = null;
    this.sweeper = new AbortController(); // stops the outbox's sweeps, once the worker has closed
    setMaxListeners(0, this.sweeper.signal); // a sweep a partition waits on it
    /** The outbox's sweeps, by queue. @type {Map<string, Promise<void>>} */
    this.sweeps = new Map();
    /** The claims of a partitioned queue while it is one. @type {Spread | null} */
    this.spread = null;
    this.closePromise = null;
    this.signalHandler = options.handleSignals ? () => void this.close() : null;
    this.runPromise = null;
    this.loopPromise = null;
    if (options.autorun ?? true) {
      // Errors reach the 'error' listeners; `run()` returns this same promise to await.
      this.run().catch(() => {});
    }
  }

  /** Claims and runs jobs until `close()`; resolves once closed, rejects on a fatal error. */
  run() {
    this.runPromise ??= (async () => {
      this.loopPromise = this.loop();
      try {
        await this.loopPromise;
      } catch (e) {
        this.report(e);
        await this.close();
        throw e;
      }
      await this.close();
    })();
    return this.runPromise;
  }

  /** Stops claiming, lets running handlers finish and settles them, up to `timeout` ms (the
   * `shutdownTimeout` option); then aborts the handlers still running, whose outcomes are not
   * sent (their leases run out and the jobs are claimed again). */
  close(timeout = this.shutdownTimeout) {
    this.closePromise ??= this.shutdown(timeout);
    return this.closePromise;
  }

  // ---- claiming ----

  async loop() {
    const version = await this.untilAnswered(() => this.queue.send(['EMQ.VERSION'], true));
    if (this.closing) return;
    checkVersion(version);
    this.claims = this.queue.client.duplicate();
    this.claims.on?.('error', (/** @type {unknown} */ e) => this.report(e));
    // A cluster client's connect reads the slot map from its root nodes, which a restart may
    // leave without an answer for a moment (RootNodesUnavailableError): asked again.
    await this.untilAnswered(() => this.claims.connect());
    if (this.closing) return;
    if (this.signalHandler) for (const s of ['SIGTERM', 'SIGINT']) process.on(s, this.signalHandler);
    this.renewTimer = setInterval(() => void this.renewAll(), this.renewMs);
    await this.untilAnswered(() => knowWidth(this.queue));
    let width = this.queue.knownWidth ?? 0;
    while (!this.closing) {
      if (width === 0) {
        width = await this.claimQueue();
        continue;
      }
      this.spread = new Spread(this, width);
      try {
        width = await this.spread.run();
      } finally {
        this.spread = null;
      }
    }
  }

  /**
   * `call`'s answer, `call` made again after a backoff while it fails as a failover, a reshard,
   * a lost connection or a server out of memory or disk does (the queue's own retries spent),
   * until the worker closes (then undefined): the start's reads, which a moment's failure must
   * not end the worker for. Any other error is thrown.
   * @template T
   * @param {() => Promise<T>} call
   * @returns {Promise<T | undefined>}
   */
  async untilAnswered(call) {
    for (let failures = 0; !this.closing; failures++) {
      try {
        return await call();
      } catch (e) {
        if (!passing(e) && !serverFull(e)) throw e;
        await sleep(backoff(failures), this.closingSignal());
      }
    }
    return undefined;
  }

  /** Claims from the queue itself until the worker closes (0), or the queue answers that it is
   * partitioned (spanned since the worker started): its width. */
  async claimQueue() {
    let failures = 0;
    while (!this.closing) {
      const free = this.free();
      if (free <= 0) {
        await this.room();
        continue;
      }
      const count = Math.min(free, this.batch);
      this.claimReserved = count;
      let reply;
      const sentAt = Date.now();
      const sentNs = this.hook ? nowNs() : 0n;
      try {
        // A claim in flight is never dropped, even by close(): its jobs would be leased to no one.
        reply = await this.claim(count);
        failures = 0;
        // The outbox's sweeps start once a claim has shown the queue workable (a refused
        // queue name is the claim's fatal error, reported once).
        this.sweepOn([this.queue]);
      } catch (e) {
        this.claimReserved = 0;
        // Closed while the claim waited for a server that did not answer: dropped with it.
        if (this.closed) return 0;
        const error = translate(e);
        if (error instanceof EmqSpannedError) {
          // Learned, as an enqueue's refusal teaches it: a user whose width read the server
          // refuses (no +emq.width) keeps it at the spread's reads, and claims the partitions.
          if (error.width > 0 && !isPartition(this.queue.name, error.width)) this.queue.knownWidth = error.width;
          return error.width;
        }
        // A failover, or a server out of memory or disk: not the worker's end.
        if (!passing(e) && !serverFull(e)) throw error;
        await sleep(backoff(failures++), this.closingSignal());
        continue;
      }
      this.claimReserved = 0;
      for (const raw of reply ?? []) this.start(raw, sentAt, sentNs);
    }
    return 0;
  }

  /** Sweeps the outbox of each of `queues` not swept yet, until the worker has closed.
   * @param {Queue[]} queues */
  sweepOn(queues) {
    for (const queue of queues) {
      if (this.sweeps.has(queue.name)) continue;
      const delivered = (/** @type {import('./outbox.js').Handover} */ entry) => this.tell('delivered', entry);
      const courier = { hook: this.hook, wait: this.wait, delivered, report: (/** @type {unknown} */ e) => this.report(e) };
      this.sweeps.set(queue.name, sweepLoop(queue, this.sweeper.signal, courier));
    }
  }

  /**
   * A settle command for `queue` (the job's): sent with retries, or with `waitReplicas`,
   * followed by `WAIT` on the queue's node, and sent again while its failure is transient or
   * the slot moved (as the queue's retries allow; one applied already answers EMQLEASE). Its
   * reply or error (typed), and whether the replicas confirmed it (null without a wait).
   * @param {Queue} queue
   * @param {Array<string | Buffer>} args
   * @param {{returnBuffers?: boolean}} [options]
   * @returns {Promise<{reply?: any, error?: unknown, replicated: boolean | null}>}
   */
  async settleCall(queue, args, options = undefined) {
    if (!this.wait) {
      try {
        return { reply: await queue.send(args, false, options), replicated: null };
      } catch (e) {
        return { error: translate(e), replicated: null };
      }
    }
    for (let attempt = 0; ; attempt++) {
      let failure;
      try {
        const { replies, confirmed } = await sendWaited(queue.client, queue.name, [args], this.wait, options);
        const [{ value, error }] = replies;
        const replicated = confirmed >= this.wait.replicas;
        if (error === undefined) return { reply: value, replicated };
        failure = { error, replicated };
      } catch (e) {
        failure = { error: e, replicated: false };
      }
      if (!passing(failure.error) || attempt >= queue.retries) {
        return { error: translate(failure.error), replicated: failure.replicated };
      }
      await sleep(backoff(attempt));
    }
  }

  claim(count) {
    return this.claimOn(this.queue.name, ['EMQ.CLAIM', this.queue.name, 'COUNT', String(count), 'LEASE', String(this.lease), 'BLOCK', String(this.block)]);
  }

  /** A claim of `queue` (`args`, the whole command) on the claim connection, payloads as bytes.
   * @param {string} queue @param {string[]} args */
  claimOn(queue, args) {
    return isCluster(this.claims) ? this.claims.sendCommand(routingKey(queue), false, args, BYTES) : this.claims.sendCommand(args, BYTES);
  }

  free() {
    return this.concurrency - this.running.size - this.claimReserved - this.mackReserved;
  }

  /** Resolves when a slot may have freed, or the worker closes. */
  room() {
    return new Promise((resolve) => {
      this.wakers.add(resolve);
    });
  }

  wake() {
    const wakers = [...this.wakers];
    this.wakers.clear();
    for (const w of wakers) w(undefined);
  }

  closingSignal() {
    return this.closer.signal;
  }

  // ---- one job ----

  /** Runs the handler of a job as a claim of `queue` (this worker's, or a partition of it)
   * replied it (`[id, payload, token]`, its headers fourth where it has some), that claim sent
   * at `sentAt` (ms). A lease's worth of time since then means the process stalled (frozen,
   * swapped out): the lease may have run out and another attempt taken the job, even finished
   * it, so the handler is not started; the job is left to its lease, counted lost. */
  start(raw, sentAt, sentNs = 0n, queue = this.queue) {
    const [id, payload, token, headers] = raw;
    this.hook?.emit('claim', { id: String(id), attempt: Number(token), queue: queue.name }, sentNs, { answeredNs: nowNs() });
    // Answered once the worker had closed (its server late), or a lease after it was sent: not
    // started, left to its lease.
    if (this.closed || Date.now() >= sentAt + this.lease) {
      this.counts.lost++;
      this.wake();
      return;
    }
    const controller = new AbortController();
    const bytes = typeof payload === 'string' ? Buffer.from(payload) : payload;
    const job = new Job(queue.name, String(id), bytes, Number(token), controller.signal, queue, headers === undefined ? {} : headerMap(headers));
    /** @type {RunState} */
    const state = { job, queue, controller, finished: false, lateRenewals: 0 };
    // By the job's own object: the same job claimed again (its lease lost) is another run.
    this.running.set(job, state);
    // A cancel of the running job, or its deadline, aborts `controller` too (`ended()`).
    void this.runJob(state);
  }

  async runJob(state) {
    const { job } = state;
    let result;
    let error;
    let threw = false;
    this.hook?.emit('handler_start', job, nowNs());
    try {
      const run = () => this.handler(job, { signal: job.signal });
      result = await (this.around ? this.around(job, run) : run());
    } catch (e) {
      threw = true;
      error = e;
    }
    this.hook?.emit('handler_end', job, nowNs(), { failure: threw ? error : undefined });
    state.finished = true;
    clearTimeout(state.late);
    // Cancelled or timed out while it ran: counted, its slot freed and its signal aborted
    // already; whatever it returned or threw is not sent.
    if (job.cancelled || job.timedOut) return;
    if (this.closed || job.leaseLost) {
      this.lost(job);
      this.release([job]);
      return;
    }
    if (!threw) {
      const waiting = this.acks.get(state.queue);
      if (waiting) waiting.push({ state, result });
      else this.acks.set(state.queue, [{ state, result }]);
      void this.flush(state.queue);
      return;
    }
    try {
      await this.fail(state, error);
    } catch (e) {
      // None that a settle foresees: reported, and the job runs again once its lease ends.
      this.report(e);
    } finally {
      this.release([job]);
    }
  }

  /** Fails the attempt with `error` (its text sent, `text` if given). An error text larger
   * than the server takes is sent again without it: the attempt still fails.
   * @param {RunState} state @param {unknown} error @param {string} [text] */
  async fail({ job, queue }, error, text = undefined) {
    const retried = error instanceof Retry;
    let wait = retried ? Math.max(0, Math.round(error.after)) : null;
    if (wait === null && this.backoff !== null) {
      try {
        wait = retryIn(this.backoff, job.attempt, error);
      } catch (e) {
        // The server's backoff applies.
        this.report(e);
      }
    }
    const sentNs = this.hook ? nowNs() : 0n;
    const args = ['EMQ.FAIL', queue.name, job.id, String(job.attempt)];
    if (wait !== null) args.push('RETRY-IN', String(wait));
    let sent = await this.settleCall(queue, [...args, 'ERROR', text ?? (retried ? error.message : errorText(error))]);
    if (sent.error instanceof EmqPayloadError) {
      this.report(sent.error);
      sent = await this.settleCall(queue, args);
    }
    this.hook?.emit('settle', job, sentNs, { answeredNs: nowNs(), action: 'fail', error: sent.error, replicated: sent.replicated });
    if (sent.error !== undefined) return this.settleRefused(job, sent.error);
    this.counts[retried ? 'retried' : 'failed']++;
    this.tell('failed', job, error);
  }

  settleRefused(job, e) {
    // The module answers EMQTIMEOUT to renewals only (a settle past the deadline is EMQLEASE,
    // the lease lost, below); one here would end the run as a renewal's does.
    if (e instanceof EmqCancelledError || e instanceof EmqTimeoutError) {
      this.ended(job, e);
    } else if (e instanceof EmqLeaseError) {
      // A renewal in flight when the settle was sent may have ended the run already: then this
      // EMQLEASE is that end's, counted with it.
      if (job.cancelled || job.timedOut) return;
      job.leaseLost = true;
      this.lost(job);
    } else {
      this.report(e);
    }
  }

  /** Counts a run whose outcome is not sent (its lease lost, or the worker closed), once. */
  lost(job) {
    if (this.countedLost.has(job)) return;
    this.countedLost.add(job);
    this.counts.lost++;
  }

  /**
   * The server ended this attempt while it ran: the job was cancelled (`EMQ.CANCEL`; a renewal
   * or its settle answered `EMQCANCELLED`, and the job is dead), or the attempt ran past its
   * deadline (a renewal answered `EMQTIMEOUT`; the server fails it with the error `timeout`, a
   * retry or dead). Its handler's signal is aborted with that error, `job.cancelled` or
   * `job.timedOut` is set, and nothing is sent for the job, now or when the handler ends (a
   * settle that raced it is not tried again). A handler still running gives up its slot at
   * once, so the next job runs even beside a handler that ignores its signal; one that has
   * ended gives it up when its settle, in flight or waiting, is done with. Counted, and the
   * event `cancelled` or `timeout`, once a run: a run counted lost before this end was learned
   * (its settle refused EMQLEASE first, or answered over another connection) moves from `lost`.
   * @param {Job} job
   * @param {EmqCancelledError | EmqTimeoutError} error
   */
  ended(job, error) {
    if (job.cancelled || job.timedOut) return;
    const timedOut = error instanceof EmqTimeoutError;
    if (timedOut) job.timedOut = true;
    else job.cancelled = true;
    if (this.countedLost.delete(job)) this.counts.lost--;
    this.counts[timedOut ? 'timedOut' : 'cancelled']++;
    const state = this.running.get(job);
    if (state) clearTimeout(state.late);
    state?.controller.abort(error);
    if (state && !state.finished) this.release([job]);
    this.hook?.emit(timedOut ? 'timed_out' : 'cancelled', job, nowNs(), { failure: error });
    this.tell(timedOut ? 'timeout' : 'cancelled', job, error);
  }

  /** Frees the slots of settled (or abandoned) jobs. */
  release(jobs) {
    for (const job of jobs) this.running.delete(job);
    this.wake();
  }

  // ---- settling ----

  /** Sends the acknowledgements of `queue` waiting, up to `SETTLE_BATCH` an `EMQ.MACK`, one call
   * at a time, each queue's (each partition's) apart from the others'; each call also claims as
   * many jobs as its acknowledgements and the free slots allow (of a partition, only on its
   * group's turn). @param {Queue} queue */
  flush(queue) {
    let flushing = this.flushing.get(queue);
    if (flushing) return flushing;
    flushing = (async () => {
      // The handlers that end in this turn of the event loop go in the same call.
      await new Promise((resolve) => setImmediate(resolve));
      for (let waiting = this.acks.get(queue); waiting && waiting.length > 0; waiting = this.acks.get(queue)) {
        const batch = waiting.splice(0, SETTLE_BATCH);
        try {
          await this.settle(queue, batch);
        } catch (e) {
          // A failure none foresees (the listeners are told through tell()): the batch's slots
          // are freed, and the queue's next acknowledgements are still sent.
          this.release(batch.map((item) => item.state.job));
          this.report(e);
        }
      }
      this.acks.delete(queue);
      this.flushing.delete(queue);
    })();
    this.flushing.set(queue, flushing);
    return flushing;
  }

  /** @param {Queue} queue @param {Array<{state: RunState, result: unknown}>} batch */
  async settle(queue, batch) {
    /** @type {Array<string | Buffer>} */
    const args = ['EMQ.MACK', queue.name];
    const kept = [];
    for (const item of batch) {
      // Cancelled or timed out while the acknowledgement waited: counted already, not sent.
      if (item.state.job.cancelled || item.state.job.timedOut) continue;
      // A lease lost (or the worker closed) while the acknowledgement waited: not sent.
      if (this.closed || item.state.job.leaseLost) {
        this.lost(item.state.job);
        continue;
      }
      let result = null;
      try {
        result = item.result === undefined || item.result === null ? null : encode(item.result);
      } catch (e) {
        result = null;
        this.report(e);
      }
      args.push(item.state.job.id, String(item.state.job.attempt));
      if (result !== null) args.push('RESULT', result);
      kept.push({ ...item, encoded: result });
    }
    const jobs = batch.map((item) => item.state.job);
    if (kept.length === 0) return this.release(jobs);
    // Of a partitioned queue, a primary's share of the free slots at most: an ack's claim sent
    // to a primary that stops answering holds no slot the others' loops could fill.
    const share = this.spread ? Math.floor(this.free() / this.spread.groups.length) : this.free();
    let next = this.closing ? 0 : Math.min(MAX_CLAIM, Math.max(0, share) + kept.length);
    // A partition's claim takes its turn in its group's rotation, or none.
    if (next > 0 && this.spread && !this.spread.turn(queue.name)) next = 0;
    if (next > 0) args.push('CLAIM', String(next), 'LEASE', String(this.lease));
    const reserved = Math.max(0, next - kept.length);
    this.mackReserved += reserved;
    const sentAt = Date.now();
    const sentNs = this.hook ? nowNs() : 0n;
    const { reply, error, replicated } = await this.settleCall(queue, args, BYTES);
    // Whatever follows, to the end of this call, runs without a wait: the claimed jobs take
    // the slots reserved for them before any claim loop looks again.
    this.mackReserved -= reserved;
    if (error instanceof EmqPayloadError && kept.some((item) => item.encoded !== null)) {
      // One result larger than the server takes refuses the whole call, and nothing of it was
      // written: each job is acknowledged apart, so only the job with that result fails.
      for (const item of kept) await this.ackApart(queue, item);
      return this.release(jobs);
    }
    if (error !== undefined) {
      const answeredNs = this.hook ? nowNs() : 0n;
      for (const item of kept) {
        this.hook?.emit('settle', item.state.job, sentNs, { answeredNs, action: 'ack', error, replicated });
        this.settleRefused(item.state.job, error);
      }
      return this.release(jobs);
    }
    const answeredNs = this.hook ? nowNs() : 0n;
    const [places, claimed] = next > 0 ? reply : [reply, []];
    const completed = [];
    kept.forEach((item, i) => {
      const place = places[i];
      this.hook?.emit('settle', item.state.job, sentNs, { answeredNs, action: 'ack', error: isErrorReply(place) ? place : undefined, replicated });
      if (isErrorReply(place)) return this.settleRefused(item.state.job, translate(place));
      this.counts.acked++;
      completed.push(item);
    });
    for (const job of jobs) this.running.delete(job);
    if (isErrorReply(claimed)) {
      // Spanned since the claim: the claim loop learns it.
      if (!(translate(claimed) instanceof EmqSpannedError)) this.report(translate(claimed));
    } else {
      if (next > 0) this.spread?.claimed(queue.name, claimed.length);
      for (const raw of claimed) this.start(raw, sentAt, sentNs, queue);
    }
    this.wake();
    // Last: the claimed jobs run whatever the listeners do.
    for (const item of completed) this.tell('completed', item.state.job, item.result);
  }

  /** Acknowledges one job with its own `EMQ.MACK`; a result the server refuses as too large
   * fails the attempt instead (retried, or dead, with an error saying so), rather than leaving
   * the job to run again at its lease's end with nothing said.
   * @param {Queue} queue @param {{state: RunState, result: unknown, encoded: string | Buffer | null}} item */
  async ackApart(queue, item) {
    const { job } = item.state;
    /** @type {Array<string | Buffer>} */
    const args = ['EMQ.MACK', queue.name, job.id, String(job.attempt)];
    if (item.encoded !== null) args.push('RESULT', item.encoded);
    const sentNs = this.hook ? nowNs() : 0n;
    const { reply, error, replicated } = await this.settleCall(queue, args);
    const refused = error ?? (isErrorReply(reply?.[0]) ? translate(reply[0]) : undefined);
    this.hook?.emit('settle', job, sentNs, { answeredNs: nowNs(), action: 'ack', error: refused, replicated });
    if (refused instanceof EmqPayloadError && item.encoded !== null) {
      const size = typeof item.encoded === 'string' ? Buffer.byteLength(item.encoded) : item.encoded.length;
      const text = `EMQPAYLOAD the handler's result (${size} bytes) is larger than the server takes: ${refused.message}`;
      return this.fail(item.state, new EmqPayloadError(text), text);
    }
    if (refused !== undefined) return this.settleRefused(job, refused);
    this.counts.acked++;
    this.tell('completed', job, item.result);
  }

  // ---- leases ----

  /** Renews the lease of every running handler (pipelined by node-redis). */
  async renewAll() {
    await Promise.all([...this.running.values()].filter((s) => this.renewing(s)).map((s) => this.renew(s)));
  }

  /** Whether `state`'s run still holds its lease, as far as the worker knows. */
  renewing(state) {
    const { job } = state;
    return !this.closed && !state.finished && !job.leaseLost && !job.cancelled && !job.timedOut && this.running.get(job) === state;
  }

  /** Renews one run's lease: a renewal answered `EMQLEASE` marks the job lost and aborts its
   * signal, one answered `EMQCANCELLED` or `EMQTIMEOUT` ends its run (`ended()`); a failover is
   * tried at the next round. A lease that now ends before the next round is renewed once it
   * has ended (`renewAt`). @param {RunState} state */
  async renew(state) {
    const { job, queue, controller } = state;
    const progress = this.progressOf(job);
    const extra = progress === undefined ? [] : ['PROGRESS', progress.bytes];
    const sentNs = this.hook ? nowNs() : 0n;
    try {
      const ends = await queue.call('EMQ.RENEW', job.id, String(job.attempt), String(this.lease), ...extra);
      this.hook?.emit('renew', job, sentNs, { answeredNs: nowNs() });
      if (this.renewing(state)) this.renewAt(state, Number(ends));
    } catch (e) {
      this.hook?.emit('renew', job, sentNs, { answeredNs: nowNs(), error: e });
      if (e instanceof EmqCancelledError || e instanceof EmqTimeoutError) {
        this.ended(job, e);
      } else if (e instanceof EmqLeaseError) {
        job.leaseLost = true;
        controller.abort(e);
      } else if (e instanceof EmqPayloadError && progress !== undefined) {
        // Progress larger than the server takes: it is not sent again (unless the handler sets
        // another), and the lease is renewed without it at once, not lost over it.
        if (job.progress === progress.source) job.progress = undefined;
        this.report(e);
        if (this.renewing(state)) await this.renew(state);
      }
    }
  }

  /** A running job's progress as the renewal sends it (and the value it came from), or
   * undefined; one that cannot be encoded is reported and dropped. @param {Job} job
   * @returns {{bytes: string | Buffer, source: unknown} | undefined} */
  progressOf(job) {
    if (job.progress === undefined) return undefined;
    try {
      return { bytes: encode(job.progress), source: job.progress };
    } catch (e) {
      this.report(e);
      job.progress = undefined;
      return undefined;
    }
  }

  /**
   * A renewal answered that the lease ends at `ends` (unix ms): capped at the attempt's
   * deadline, that can come before the next round. Then the run is renewed again just after
   * it, and so learns of its timeout then (`EMQTIMEOUT`), not a round later. A server clock
   * behind this one answers the same end again: each renewal that comes so waits twice as long
   * past it (`LATE_RENEWAL` ms first), until the rounds are as near.
   * @param {RunState} state
   * @param {number} ends
   */
  renewAt(state, ends) {
    clearTimeout(state.late);
    state.late = undefined;
    const wait = Math.max(0, ends - Date.now()) + LATE_RENEWAL * 2 ** state.lateRenewals;
    if (!(wait < this.renewMs)) return;
    state.lateRenewals++;
    state.late = setTimeout(() => {
      state.late = undefined;
      if (this.renewing(state)) void this.renew(state);
    }, wait);
  }

  // ---- closing ----

  async shutdown(timeout) {
    this.closing = true;
    this.closer.abort();
    this.wake();
    const deadline = Date.now() + timeout;
    // The claim in flight ends within `block` ms, and its jobs run and are drained with the
    // rest; a claim its server does not answer is waited for up to the timeout (its jobs, if it
    // is answered after, are left to their leases).
    const waited = new AbortController();
    await Promise.race([this.loopPromise?.catch(() => {}), sleep(timeout, waited.signal)]);
    waited.abort();
    await this.drained(Math.max(0, deadline - Date.now()));
    this.closed = true;
    for (const state of this.running.values()) {
      clearTimeout(state.late);
      state.controller.abort(new Error('the worker closed before the job finished'));
    }
    clearInterval(this.renewTimer ?? undefined);
    // The sweeps go on while the handlers drain, whose children may have parents to reach; a
    // sweep its server does not answer is waited for no longer than the timeout.
    this.sweeper.abort();
    const swept = new AbortController();
    await Promise.race([Promise.all(this.sweeps.values()), sleep(Math.max(0, deadline - Date.now()), swept.signal)]);
    swept.abort();
    if (this.signalHandler) for (const s of ['SIGTERM', 'SIGINT']) process.off(s, this.signalHandler);
    // A cluster client has no `isOpen`; a client that never connected refuses disconnect().
    if (this.claims) await this.claims.disconnect().catch(() => {});
    this.emit('closed');
  }

  /** Resolves once no job runs and nothing waits to be settled, or after `timeout` ms. */
  async drained(timeout) {
    const deadline = Date.now() + timeout;
    while ((this.running.size > 0 || this.flushing.size > 0) && Date.now() < deadline) {
      await Promise.race([this.room(), sleep(Math.min(50, Math.max(0, deadline - Date.now())))]);
    }
  }

  /** Emits `event` to its listeners: one that throws is reported, and costs no job its run or
   * its slot. @param {string} event @param {unknown[]} args */
  tell(event, ...args) {
    try {
      this.emit(event, ...args);
    } catch (e) {
      try {
        this.report(e);
      } catch (again) {
        console.error(`echomq worker: a listener of '${event}' threw, and so did one of 'error':`, e, again);
      }
    }
  }

  /** An error no call is there to receive: to the 'error' listeners, or stderr without one. */
  report(error) {
    try {
      if (this.listenerCount('error') > 0) this.emit('error', error);
      else console.error('echomq worker:', error);
    } catch (again) {
      console.error("echomq worker: an 'error' listener threw:", again, 'on', error);
    }
  }
}
