// The Worker and job timeouts, against a real server of two attempts a job and a short backoff:
// an attempt past its deadline has its handler's signal aborted with an EmqTimeoutError, nothing
// sent for it, its slot freed, one 'timeout' event and count a run; the server retries the job,
// then buries it with the error `timeout`. A lease capped at the deadline is renewed once it
// ends, before the next round of renewals. A renewal refused EMQTIMEOUT and an ack refused
// EMQLEASE for the same run, answered in either order, count it timed out once.
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { EmqTimeoutError, Queue, Worker, eventsKey } from '../src/index.js';
import { LATE_RENEWAL } from '../src/worker.js';
import { Server, until } from './support/server.js';

/** @type {Server} */
let server;
let client;
before(async () => {
  server = await Server.start(['--emq.max-attempts', '2', '--emq.backoff-base-ms', '100']);
  client = await server.connect();
});
after(() => server.stop());

/** The event stream of queue `name` for job `id`, its events oldest first. */
async function streamed(name, id) {
  const entries = await server.cmd('XRANGE', eventsKey(name), '-', '+');
  return entries
    .map(([, fields]) => Object.fromEntries(Array.from({ length: fields.length / 2 }, (_, i) => [String(fields[2 * i]), String(fields[2 * i + 1])])))
    .filter((f) => f.id === id)
    .map((f) => f.event);
}

/** Waits (30 s at most) for `f()`, failing the test with `what` if it never holds. */
async function waitFor(f, what) {
  assert.ok(await until(f, 30_000), `timed out waiting for ${what}`);
}

/** `queue` whose commands' answers (the server's, as they came) reach the worker only when the
 * test lets each through, `release(command)`: the order they arrive in is the test's. `sent`
 * waits for a command to have been sent. */
function holding(queue) {
  /** @type {{command: string, open: () => void}[]} */
  const held = [];
  const hold = (command, answer) => {
    const answered = answer.then((value) => ({ value }), (error) => ({ error }));
    return new Promise((open) => held.push({ command, open: () => open(undefined) }))
      .then(() => answered)
      .then(({ value, error }) => {
        if (error !== undefined) throw error;
        return value;
      });
  };
  const gated = Object.create(queue);
  gated.send = (args, readonly, options) => hold(String(args[0]), queue.send(args, readonly, options));
  gated.call = (command, ...args) => hold(command, queue.call(command, ...args));
  const sent = (command) => waitFor(() => held.some((h) => h.command === command), `${command} to be sent`);
  const release = async (command) => {
    await sent(command);
    held.splice(held.findIndex((h) => h.command === command), 1)[0].open();
  };
  return { gated, sent, release };
}

describe('timeouts', () => {
  test('a handler that stops on its signal: aborted with EmqTimeoutError each attempt, nothing sent, then dead with timeout', async () => {
    const q = new Queue(client, 'timeout-coop');
    await q.enableEvents();
    const id = await q.enqueue('slow', { timeout: 300 });
    const runs = [];
    const events = [];
    const timeouts = [];
    // Renewals every 200 ms: the first ends at the deadline, renewed again there.
    const worker = new Worker(
      q,
      (job, { signal }) => {
        runs.push(job);
        return new Promise((_, reject) => signal.addEventListener('abort', () => reject(signal.reason)));
      },
      { lease: 600, concurrency: 1, onEvent: (e) => events.push(e) },
    );
    worker.on('timeout', (job, error) => timeouts.push([job, error]));
    await waitFor(async () => (await q.job(id))?.state === 'dead', 'the job to die');
    await waitFor(() => worker.counts.timedOut === 2, 'both runs to learn of their timeout');
    await worker.close();
    assert.deepEqual(worker.counts, { acked: 0, failed: 0, retried: 0, lost: 0, cancelled: 0, timedOut: 2 });
    assert.deepEqual(runs.map((job) => job.attempt), [1, 2]);
    assert.deepEqual(timeouts.map(([job]) => job), runs, "one 'timeout' event a run, with its job");
    for (const [job, error] of timeouts) {
      assert.ok(error instanceof EmqTimeoutError, `${error} is an EmqTimeoutError`);
      assert.equal(error.code, 'EMQTIMEOUT');
      assert.equal(job.signal.reason, error, 'the signal aborted with it');
      assert.ok(job.timedOut && !job.cancelled && !job.leaseLost);
    }
    const row = await q.job(id);
    assert.deepEqual([row.set, row.error, row.attempts, row.timedout], ['dead', 'timeout', 2, 2]);
    // Nothing was sent for either attempt: no settle; each run's last renewal was refused.
    for (const token of [1, 2]) {
      const kinds = events.filter((e) => e.id === id && e.token === token).map((e) => [e.kind, e.outcome]);
      assert.deepEqual(kinds.filter(([k]) => k !== 'renew' && k !== 'handler_end'), [['claim', 'ok'], ['handler_start', 'ok'], ['timed_out', 'ok']]);
      assert.deepEqual(kinds.filter(([k]) => k === 'renew').at(-1), ['renew', 'refused']);
    }
    assert.match(events.find((e) => e.kind === 'timed_out').error, /^EmqTimeoutError: EMQTIMEOUT /);
    // The server retried it after the first deadline and buried it after the second.
    const stream = await streamed('timeout-coop', id);
    assert.deepEqual(stream.filter((e) => e !== 'promoted'), ['enqueued', 'claimed', 'retrying', 'claimed', 'dead']);
  });

  test('a handler that ignores its signal: the worker runs the next job, and the timed-out one is dead with timeout once', async () => {
    const q = new Queue(client, 'timeout-stubborn');
    await q.enableEvents();
    const stubborn = await q.enqueue('stubborn', { timeout: 300 });
    const started = [];
    const events = [];
    const letGo = [];
    const worker = new Worker(
      q,
      async (job) => {
        started.push(`${job.payload} ${job.attempt}`);
        // Ignores `signal`: ends only when the test lets it.
        if (job.payload === 'stubborn') return new Promise((resolve) => letGo.push(resolve));
        return 'next done';
      },
      { lease: 600, concurrency: 1, onEvent: (e) => events.push(e) },
    );
    await waitFor(() => started.length === 1, 'the stubborn job to run');
    // Behind it, with the only slot taken: it waits in pending.
    const next = await q.enqueue('next');
    await waitFor(async () => (await q.job(stubborn))?.state === 'dead', 'the stubborn job to die');
    await waitFor(() => worker.counts.acked === 1 && worker.counts.timedOut === 2, 'the next job acked, both stubborn runs timed out');
    assert.deepEqual([...started].sort(), ['next 1', 'stubborn 1', 'stubborn 2']);
    assert.equal(letGo.length, 2, 'both stubborn handlers still run');
    // They end at last: what they return is dropped, not sent.
    for (const resolve of letGo) resolve('too late');
    await worker.close();
    assert.deepEqual(worker.counts, { acked: 1, failed: 0, retried: 0, lost: 0, cancelled: 0, timedOut: 2 });
    const row = await q.job(stubborn);
    assert.deepEqual([row.set, row.error, row.attempts], ['dead', 'timeout', 2]);
    assert.equal((await q.job(next)).state, 'done');
    const stats = await q.stats();
    assert.deepEqual([stats.dead, stats.active, stats.pending, stats.scheduled], [1, 0, 0, 0]);
    const of = (id) => events.filter((e) => e.id === id).map((e) => `${e.kind} ${e.token}`);
    assert.ok(!of(stubborn).some((k) => k.startsWith('settle')), 'no settle sent for the timed-out job');
    assert.deepEqual(of(stubborn).filter((k) => k.startsWith('timed_out')), ['timed_out 1', 'timed_out 2']);
    const order = events.map((e) => `${e.kind} ${e.id} ${e.token}`);
    assert.ok(order.indexOf(`timed_out ${stubborn} 1`) < order.indexOf(`handler_start ${next} 1`), 'the next job started once the slot was freed');
    assert.deepEqual((await streamed('timeout-stubborn', stubborn)).filter((e) => e === 'dead'), ['dead'], 'dead once');
  });

  test('a lease capped at the deadline is renewed as it ends, before the next round of renewals', async () => {
    const q = new Queue(client, 'timeout-prompt');
    // Rounds of renewals every 20 s (a third of the lease), the deadline 3 s after the claim:
    // the test runs the first round itself once both handlers run, seconds before the deadline,
    // and the timer's first round comes many seconds after it.
    const untimed = await q.enqueue('untimed');
    const timed = await q.enqueue('timed', { timeout: 3_000 });
    const events = [];
    const worker = new Worker(
      q,
      (job, { signal }) => new Promise((resolve) => signal.addEventListener('abort', () => resolve(job.payload))),
      { lease: 60_000, concurrency: 2, onEvent: (e) => events.push(e) },
    );
    await waitFor(() => events.filter((e) => e.kind === 'handler_start').length === 2, 'both handlers to run');
    await worker.renewAll();
    await waitFor(() => worker.counts.timedOut === 1, 'the timed job to time out');
    await worker.close(0);
    const renewals = (id) => events.filter((e) => e.kind === 'renew' && e.id === id).map((e) => e.outcome);
    assert.deepEqual(renewals(untimed), ['ok'], "one round of renewals, the test's: the timer's never came");
    // The timed job's renewal in that round was capped at its deadline, so the worker renewed it
    // again as the lease ended (more than once if the server answered that end again): refused.
    const own = renewals(timed);
    assert.ok(own.length >= 2, `renewed in the round and after it: ${own}`);
    assert.deepEqual(own, [...own.slice(0, -1).map(() => 'ok'), 'refused']);
    const order = events.map((e) => `${e.kind} ${e.id}`);
    assert.ok(order.lastIndexOf(`renew ${timed}`) < order.indexOf(`timed_out ${timed}`), 'the refusal ended the run');
  });

  for (const first of ['EMQ.RENEW', 'EMQ.MACK']) {
    test(`a run whose renewal (EMQTIMEOUT) and ack (EMQLEASE) raced, ${first} answered first: counted timed out once, never lost`, async () => {
      const q = new Queue(client, `timeout-race-${first === 'EMQ.RENEW' ? 'renew' : 'mack'}`);
      const id = await q.enqueue('raced', { timeout: 200 });
      const { gated, sent, release } = holding(q);
      const events = [];
      const seen = [];
      /** @type {(value: string) => void} */
      let finish = () => {};
      const worker = new Worker(gated, () => new Promise((resolve) => (finish = resolve)), { autorun: false, onEvent: (e) => events.push(e.kind) });
      for (const kind of ['completed', 'failed', 'cancelled', 'timeout']) worker.on(kind, () => seen.push(kind));
      // Claimed as the worker's claim would, with a lease far past the deadline; no rounds of
      // renewals run (autorun false): the test sends the one renewal.
      const [raw] = await q.send(['EMQ.CLAIM', q.name, 'COUNT', '1', 'LEASE', '600000']);
      // Paused: the ack's EMQ.MACK ... CLAIM cannot take the job again once the server retries it.
      await q.pause();
      worker.start(raw, Date.now());
      const [state] = worker.running.values();
      await waitFor(async () => (await q.job(id))?.timedout === 1, 'the server to end the attempt at its deadline');
      // A renewal sent while the handler runs, then the handler ends and its ack is sent: the
      // server refuses both, the renewal EMQTIMEOUT and the ack's place EMQLEASE.
      const renewed = worker.renew(state);
      finish('too late');
      await sent('EMQ.RENEW');
      await sent('EMQ.MACK');
      await release(first);
      if (first === 'EMQ.MACK') {
        await waitFor(() => worker.flushing.size === 0, 'the ack to be settled');
        assert.equal(worker.counts.lost, 1, 'the refused ack, alone, is a lost lease');
      } else {
        await renewed;
      }
      await release(first === 'EMQ.RENEW' ? 'EMQ.MACK' : 'EMQ.RENEW');
      await renewed;
      await waitFor(() => worker.flushing.size === 0 && worker.running.size === 0, 'the ack to be settled, the slot freed');
      assert.deepEqual(worker.counts, { acked: 0, failed: 0, retried: 0, lost: 0, cancelled: 0, timedOut: 1 });
      assert.deepEqual(seen, ['timeout'], "one 'timeout' event, nothing else");
      assert.deepEqual(events.filter((k) => k === 'timed_out'), ['timed_out']);
      assert.ok(state.job.timedOut && !state.job.cancelled);
      // Failed by the server at its deadline, to be retried; the ack did nothing.
      const row = await q.job(id);
      assert.ok(['scheduled', 'pending'].includes(String(row.set)), `${row.set}: waits for its retry`);
      assert.deepEqual([row.error, row.timedout], ['timeout', 1]);
    });
  }

  test('a lease end the server keeps answering (its clock behind ours) is renewed ever later, then left to the rounds', () => {
    const worker = new Worker(new Queue(client, 'timeout-skew'), () => undefined, { lease: 3_000, autorun: false });
    const state = { job: /** @type {any} */ ({}), controller: new AbortController(), finished: false, lateRenewals: 0 };
    let scheduled = 0;
    for (let i = 0; i < 20; i++) {
      // Renewed at the end it answered, and answered the same end: past already, here.
      worker.renewAt(state, Date.now() - 1);
      if (state.late === undefined) break;
      scheduled++;
      clearTimeout(state.late);
    }
    assert.equal(state.late, undefined, 'it stopped scheduling renewals of its own');
    // 10, 20, 40, ... 640 ms past the end: each below the 1 s between rounds.
    assert.equal(scheduled, Math.ceil(Math.log2(1_000 / LATE_RENEWAL)), 'each waited twice as long as the one before');
  });
});
