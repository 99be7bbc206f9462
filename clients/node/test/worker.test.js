// The Worker against a real server: batched claims within the concurrency, renewals, retries
// into dead with the stack, typed lease errors, aborts on a lost lease, results and draining,
// and jobs cancelled while they run.
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { EmqCancelledError, EmqLeaseError, Queue, Retry, Worker, eventsKey } from '../src/index.js';
import { Server, until } from './support/server.js';

/** @type {Server} */
let server;
let client;
before(async () => {
  server = await Server.start();
  client = await server.connect();
});
after(() => server.stop());

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

/** Resolves once `worker.counts` says `n` jobs settled one way or another (bounded wait). */
async function settled(worker, n, timeout = 30_000) {
  const ok = await until(() => worker.counts.acked + worker.counts.failed + worker.counts.retried + worker.counts.lost >= n, timeout);
  assert.ok(ok, `settled ${JSON.stringify(worker.counts)} of ${n}`);
}

/** Resolves true once the lease deadline of job `id` (its score in `active`) has moved `n`
 * times, as renewals move it (bounded wait). */
async function renewals(id, n, timeout = 30_000) {
  const queue = id && (await findQueue(id));
  const seen = new Set();
  return until(async () => {
    const score = await server.cmd('ZSCORE', `emq:{${queue}}:active`, id);
    if (score !== null) seen.add(String(score));
    return seen.size > n;
  }, timeout);
}

/** The queue of the tests' job `id` (each test has a queue of its own). */
async function findQueue(id) {
  for (const name of ['slow', 'again']) {
    if ((await server.cmd('EXISTS', `emq:{${name}}:job:${id}`)) === 1) return name;
  }
  throw new Error(`no queue holds ${id}`);
}

describe('Worker', () => {
  test('at concurrency 8 never more than 8 jobs are active, and each job is acked once', async () => {
    const q = new Queue(client, 'conc8');
    const ids = await q.enqueueMany(Array.from({ length: 200 }, (_, n) => ({ payload: { n } })));
    let inside = 0;
    let most = 0;
    const seen = new Map();
    const worker = new Worker(
      q,
      async (job) => {
        inside++;
        most = Math.max(most, inside);
        seen.set(job.id, (seen.get(job.id) ?? 0) + 1);
        await sleep(5 + (job.data.n % 7));
        inside--;
      },
      { concurrency: 8 },
    );
    const completed = new Set();
    worker.on('completed', (job) => completed.add(job.id));
    let sampledMost = 0;
    while (worker.counts.acked < 200) {
      const { active } = await q.stats();
      sampledMost = Math.max(sampledMost, active);
      await sleep(3);
    }
    await worker.close();
    assert.equal(most, 8, 'the handlers ran 8 at a time at most, and reached 8');
    assert.ok(sampledMost <= 8, `EMQ.STATS active reached ${sampledMost}`);
    assert.equal(seen.size, 200);
    assert.deepEqual(new Set(seen.values()), new Set([1]));
    assert.deepEqual([...seen.keys()].sort(), [...ids].sort());
    assert.deepEqual(worker.counts, { acked: 200, failed: 0, retried: 0, lost: 0, cancelled: 0, timedOut: 0 });
    assert.equal(completed.size, 200, "a 'completed' event for each job");
    assert.equal((await q.stats()).active, 0);
  });

  test('settling claims the next jobs in the same EMQ.MACK', async () => {
    await server.cmd('CONFIG', 'RESETSTAT');
    const q = new Queue(client, 'claimnext');
    await q.enqueueMany(Array.from({ length: 50 }, () => ({ payload: 'x' })));
    const worker = new Worker(q, async () => sleep(2), { concurrency: 4 });
    await settled(worker, 50);
    await worker.close();
    const stats = String(await server.cmd('INFO', 'commandstats'));
    const mack = /cmdstat_emq\.mack:calls=(\d+)/.exec(stats);
    assert.ok(mack && Number(mack[1]) > 0, 'EMQ.MACK was used');
    assert.equal(worker.counts.acked, 50);
  });

  test('a listener that throws costs no job its run: every job acked once, each throw reported', async () => {
    const q = new Queue(client, 'throwing-listener');
    await q.enqueueMany(Array.from({ length: 40 }, () => ({ payload: 'x' })));
    const worker = new Worker(q, async () => sleep(1), { concurrency: 4 });
    const completed = [];
    const reported = [];
    worker.on('completed', (job) => {
      completed.push(job.id);
      throw new Error('a listener of completed');
    });
    worker.on('error', (e) => reported.push(e.message));
    assert.ok(await until(() => completed.length === 40, 30_000), `${completed.length} of 40 completed`);
    await worker.close();
    assert.equal(new Set(completed).size, 40);
    assert.equal(worker.counts.acked, 40);
    assert.deepEqual(new Set(reported), new Set(['a listener of completed']));
    assert.equal(reported.length, 40);
    assert.equal((await q.stats()).active, 0, 'no job left leased');
  });

  test('a payload that is not text reaches the handler byte for byte, by claim and by claim-next', async () => {
    const q = new Queue(client, 'binary');
    const all = Buffer.from(Array.from({ length: 256 }, (_, n) => n));
    const payloads = Array.from({ length: 12 }, (_, n) => Buffer.concat([all, Buffer.from([n])]));
    await q.enqueueMany(payloads.map((payload) => ({ payload })));
    const seen = [];
    const worker = new Worker(q, async (job) => {
      seen.push(Buffer.from(job.bytes));
    }, { concurrency: 2 });
    await settled(worker, 12);
    await worker.close();
    assert.equal(worker.counts.acked, 12);
    const key = (b) => b.toString('hex');
    assert.deepEqual(seen.map(key).sort(), payloads.map(key).sort());
  });

  test('a handler that throws is retried with backoff, then dead with its stack', async () => {
    await server.cmd('CONFIG', 'SET', 'emq.max-attempts', '3');
    try {
      const q = new Queue(client, 'throws');
      const id = await q.enqueue('boom');
      const attempts = [];
      const worker = new Worker(
        q,
        (job) => {
          attempts.push(job.attempt);
          throw new TypeError(`handler broke on attempt ${job.attempt}`);
        },
        { backoff: 10 },
      );
      const failed = [];
      worker.on('failed', (job, e) => failed.push([job.id, e.message]));
      assert.ok(await until(async () => (await q.stats()).dead === 1));
      await worker.close();
      assert.deepEqual(attempts, [1, 2, 3]);
      assert.equal(failed.length, 3);
      const row = await q.job(id);
      assert.equal(row.set, 'dead');
      assert.equal(row.attempts, 3);
      assert.match(row.error, /^TypeError: handler broke on attempt 3\n\s+at /);
      assert.match(row.error, /worker\.test\.js/);
    } finally {
      await server.cmd('CONFIG', 'SET', 'emq.max-attempts', '25');
    }
  });

  test("a worker without a backoff leaves the retry's wait to the server's, one with one sends its own", async () => {
    await server.cmd('CONFIG', 'SET', 'emq.backoff-base-ms', '3600000');
    try {
      for (const [name, options, least, most] of [
        ['server-backoff', {}, 3_000_000, Infinity],
        ['own-backoff', { backoff: 60_000 }, 0, 600_000],
      ]) {
        const q = new Queue(client, name);
        const id = await q.enqueue('boom');
        const sent = Date.now();
        const worker = new Worker(q, () => {
          throw new Error('no');
        }, options);
        assert.ok(await until(async () => (await q.stats()).scheduled === 1), name);
        await worker.close();
        const row = await q.job(id);
        const wait = Number(row.due) - sent;
        assert.ok(wait > least && wait < most, `${name}: due ${wait} ms after the enqueue`);
      }
    } finally {
      await server.cmd('CONFIG', 'SET', 'emq.backoff-base-ms', '1000');
    }
  });

  test('Retry fails the attempt for a retry after its own delay', async () => {
    const q = new Queue(client, 'retry');
    const id = await q.enqueue('later');
    const worker = new Worker(q, (job) => {
      if (job.attempt === 1) throw new Retry(60_000, 'not yet');
      return 'ok';
    });
    await settled(worker, 1);
    await worker.close();
    const row = await q.job(id);
    assert.equal(row.set, 'scheduled');
    assert.equal(row.error, 'not yet');
    assert.ok(row.due > Date.now() + 30_000, 'due about a minute on');
    assert.deepEqual(worker.counts, { acked: 0, failed: 0, retried: 1, lost: 0, cancelled: 0, timedOut: 0 });
  });

  test('a slow handler keeps its lease through renewals: acked once, on attempt 1', async () => {
    const q = new Queue(client, 'slow');
    const id = await q.enqueue('slow');
    const runs = [];
    const worker = new Worker(
      q,
      async (job) => {
        runs.push(job.attempt);
        job.progress = 'halfway';
        // Four renewals of a 1.5 s lease (every 0.5 s): the handler outlives the lease it began
        // with, counted by the deadlines the server kept, not by a clock.
        assert.ok(await renewals(id, 4), 'four renewals seen');
        return { done: true };
      },
      { lease: 1500 },
    );
    await settled(worker, 1);
    await worker.close();
    assert.deepEqual(runs, [1]);
    assert.deepEqual(worker.counts, { acked: 1, failed: 0, retried: 0, lost: 0, cancelled: 0, timedOut: 0 });
    const row = await q.job(id);
    assert.equal(row.state, 'done');
    assert.equal(row.attempts, 1);
    assert.equal(row.result, '{"done":true}');
    assert.equal(row.progress, 'halfway');
  });

  test('a stale token is refused with EmqLeaseError', async () => {
    const q = new Queue(client, 'stale');
    const id = await q.enqueue('x');
    const [[claimed, , stale]] = await q.call('EMQ.CLAIM', 'COUNT', 1, 'LEASE', 60_000);
    assert.equal(claimed, id);
    // The lease runs out and another claim takes the job: the first token is now stale.
    await server.cmd('ZADD', 'emq:{stale}:active', 'XX', '0', id);
    let token;
    assert.ok(await until(async () => {
      const jobs = await q.call('EMQ.CLAIM', 'COUNT', 1, 'LEASE', 60_000);
      token = jobs?.[0]?.[2];
      return token !== undefined;
    }), 'claimed again');
    assert.equal(token, stale + 1);
    await assert.rejects(q.call('EMQ.ACK', id, stale), EmqLeaseError);
    await assert.rejects(q.call('EMQ.RENEW', id, stale, 1000), (e) => e instanceof EmqLeaseError && e.code === 'EMQLEASE');
    assert.equal(await q.call('EMQ.ACK', id, token), 1);
  });

  test('a job claimed again while its lost run still ends is a run of its own: renewed, acked, counted', async () => {
    const q = new Queue(client, 'again');
    const id = await q.enqueue('x');
    const release = [];
    const attempts = [];
    const worker = new Worker(
      q,
      (job) =>
        new Promise((resolve) => {
          attempts.push(job.attempt);
          release[job.attempt] = resolve;
        }),
      { concurrency: 2, lease: 1500 },
    );
    assert.ok(await until(() => attempts.length === 1), 'attempt 1 runs');
    // Its lease runs out under it; the same worker's next claim takes the job (attempt 2).
    await server.cmd('ZADD', 'emq:{again}:active', 'XX', '0', id);
    assert.ok(await until(() => attempts.length === 2, 30_000), 'attempt 2 runs beside it');
    assert.deepEqual(attempts, [1, 2]);
    release[1]('late');
    // The lost run's end frees its own slot only: attempt 2 is still renewed.
    assert.ok(await renewals(id, 2), 'attempt 2 renewed after attempt 1 ended');
    release[2]('done');
    await settled(worker, 2);
    await worker.close();
    assert.deepEqual(worker.counts, { acked: 1, failed: 0, retried: 0, lost: 1, cancelled: 0, timedOut: 0 });
    const row = await q.job(id);
    assert.deepEqual([row.state, row.attempts], ['done', 2]);
  });

  test('a lost lease aborts the handler signal and its outcome is not sent', async () => {
    const q = new Queue(client, 'lost');
    const id = await q.enqueue('x');
    let reason;
    const worker = new Worker(
      q,
      (job, { signal }) =>
        new Promise((resolve) => {
          signal.addEventListener('abort', () => {
            reason = signal.reason;
            resolve('too late');
          });
        }),
      { lease: 300 },
    );
    assert.ok(await until(async () => (await q.stats()).active === 1));
    // Another life of the job takes over: the worker's token is now stale.
    await server.cmd('ZREM', `emq:{lost}:active`, id);
    await settled(worker, 1);
    await worker.close();
    assert.ok(reason instanceof EmqLeaseError);
    assert.deepEqual(worker.counts, { acked: 0, failed: 0, retried: 0, lost: 1, cancelled: 0, timedOut: 0 });
  });

  test('close() drains the running handlers: each acked, none lost', async () => {
    const q = new Queue(client, 'drain');
    await q.enqueueMany(Array.from({ length: 6 }, () => ({ payload: 'x' })));
    let started = 0;
    const worker = new Worker(q, async () => {
      started++;
      await sleep(300);
    }, { concurrency: 3 });
    assert.ok(await until(() => started === 3));
    await worker.close();
    assert.equal(started, 3);
    assert.deepEqual(worker.counts, { acked: 3, failed: 0, retried: 0, lost: 0, cancelled: 0, timedOut: 0 });
    const stats = await q.stats();
    assert.equal(stats.active, 0);
    assert.equal(stats.pending, 3);
  });

  test('close() past its timeout aborts the handlers still running and sends nothing for them', async () => {
    const q = new Queue(client, 'abort');
    await q.enqueue('x');
    let aborted = false;
    const worker = new Worker(q, (job, { signal }) => new Promise((resolve) => {
      signal.addEventListener('abort', () => {
        aborted = true;
        resolve(undefined);
      });
    }), { shutdownTimeout: 100 });
    assert.ok(await until(async () => (await q.stats()).active === 1));
    await worker.close();
    assert.ok(aborted);
    assert.equal(worker.counts.lost, 1);
    assert.equal((await q.stats()).active, 1, 'left to its lease');
  });

  test('a job whose claim was sent a lease ago is not started: left to its lease, then run once', async () => {
    const q = new Queue(client, 'stalled');
    const id = await q.enqueue('x');
    const runs = [];
    const worker = new Worker(q, async (job) => {
      runs.push(job.attempt);
    }, { lease: 1000, autorun: false });
    // The first claim's answer reaches the worker after more than a lease, as if the process
    // had stalled with it in flight.
    const claim = worker.claim.bind(worker);
    let first = true;
    worker.claim = async (count) => {
      const reply = await claim(count);
      if (first && reply?.length) {
        first = false;
        await sleep(1200);
      }
      return reply;
    };
    void worker.run();
    await settled(worker, 2);
    await worker.close();
    assert.deepEqual(runs, [2], 'attempt 1 never ran; attempt 2 ran once');
    assert.deepEqual(worker.counts, { acked: 1, failed: 0, retried: 0, lost: 1, cancelled: 0, timedOut: 0 });
    assert.deepEqual((await q.job(id)).state, 'done');
  });

  test('claims refused while the server is out of memory are waited out, not the worker\'s end', async () => {
    const q = new Queue(client, 'full');
    const id = await q.enqueue('x');
    await server.cmd('CONFIG', 'SET', 'maxmemory', '1');
    const errors = [];
    const worker = new Worker(q, async () => {}, { autorun: false });
    worker.on('error', (e) => errors.push(e));
    const running = worker.run();
    try {
      assert.ok(await until(async () => {
        const stats = String(await server.cmd('INFO', 'commandstats'));
        return /cmdstat_emq\.claim:.*rejected_calls=[1-9]/.test(stats);
      }), 'a claim was refused with OOM');
    } finally {
      await server.cmd('CONFIG', 'SET', 'maxmemory', '0');
    }
    await settled(worker, 1);
    await worker.close();
    await running;
    assert.deepEqual(errors, []);
    assert.equal((await q.job(id)).state, 'done');
  });

  test('a fatal claim error reaches the error listeners and closes the worker', async () => {
    const q = new Queue(client, 'bad{name');
    const errors = [];
    const worker = new Worker(q, () => {}, { autorun: false });
    worker.on('error', (e) => errors.push(e));
    await assert.rejects(worker.run(), { name: 'EmqQueueError' });
    assert.equal(errors.length, 1);
  });
});

describe('onEvent', () => {
  test('a claim, the handler start and end and the settle of each job, with the server answers', async () => {
    const q = new Queue(client, 'observed');
    await server.cmd('CONFIG', 'SET', 'emq.max-attempts', '1');
    try {
      const [good, bad] = await q.enqueueMany([{ payload: 'good' }, { payload: 'bad' }]);
      const events = [];
      const worker = new Worker(
        q,
        (job) => {
          if (job.payload === 'bad') throw new Error('bad job');
          return 'ok';
        },
        {
          name: 'observer',
          onEvent: (e) => {
            events.push(e);
            throw new Error('a hook that throws is not the worker end');
          },
        },
      );
      await settled(worker, 2);
      await worker.close();
      assert.equal(worker.name, 'observer');
      const of = (id) => events.filter((e) => e.id === id).map((e) => [e.kind, e.outcome, e.action, e.error]);
      assert.deepEqual(of(good), [
        ['claim', 'ok', null, null],
        ['handler_start', 'ok', null, null],
        ['handler_end', 'ok', null, null],
        ['settle', 'ok', 'ack', null],
      ]);
      assert.deepEqual(of(bad), [
        ['claim', 'ok', null, null],
        ['handler_start', 'ok', null, null],
        ['handler_end', 'ok', null, 'Error: bad job'],
        ['settle', 'ok', 'fail', null],
      ]);
      for (const e of events) {
        assert.deepEqual([e.worker, e.queue, e.token, e.replicated], ['observer', 'observed', 1, null]);
        assert.ok(typeof e.sentNs === 'bigint' && e.sentNs <= e.answeredNs);
        assert.ok(e.sentNs > 1_700_000_000_000_000_000n, 'Unix-epoch nanoseconds');
      }
      const stale = await q.call('EMQ.RENEW', good, 1, 1000).catch((e) => e);
      assert.ok(stale instanceof EmqLeaseError);
      assert.match(new Worker(q, () => {}, { autorun: false }).name, /^.+:\d+:[0-9a-f]{6}$/);
    } finally {
      await server.cmd('CONFIG', 'SET', 'emq.max-attempts', '25');
    }
  });

  test('renewals are events too, each with the server answer', async () => {
    const q = new Queue(client, 'observed-renewals');
    const id = await q.enqueue('slow');
    const events = [];
    const worker = new Worker(
      q,
      async () => {
        assert.ok(await until(() => events.some((e) => e.kind === 'renew'), 30_000));
      },
      { lease: 600, onEvent: (e) => events.push(e) },
    );
    await settled(worker, 1);
    await worker.close();
    const kinds = events.map((e) => e.kind);
    assert.deepEqual([kinds[0], kinds[1], kinds.at(-2), kinds.at(-1)], ['claim', 'handler_start', 'handler_end', 'settle']);
    const renewals = events.filter((e) => e.kind === 'renew');
    assert.ok(renewals.length >= 1);
    for (const r of renewals) assert.deepEqual([r.id, r.outcome, r.action, r.error], [id, 'ok', null, null]);
  });
});


/** The event stream of queue `name` (`EMQ.EVENTS`), as `[event, id]` pairs, oldest first. */
async function streamed(name) {
  const entries = await server.cmd('XRANGE', eventsKey(name), '-', '+');
  return entries.map(([, fields]) => {
    const f = Object.fromEntries(Array.from({ length: fields.length / 2 }, (_, i) => [String(fields[2 * i]), String(fields[2 * i + 1])]));
    return [f.event, f.id];
  });
}

describe('cancelling a running job', () => {
  test('a handler that stops on its signal: aborted with EmqCancelledError, the job dead once, nothing sent', async () => {
    const q = new Queue(client, 'cancel-coop');
    await q.enableEvents();
    const id = await q.enqueue('x');
    const reasons = [];
    const events = [];
    const cancelled = [];
    let handled;
    const worker = new Worker(
      q,
      (job, { signal }) => {
        handled = job;
        // A handler that awaits work which rejects once its signal aborts.
        return new Promise((_, reject) => {
          signal.addEventListener('abort', () => {
            reasons.push(signal.reason);
            reject(signal.reason);
          });
        });
      },
      { lease: 600, concurrency: 1, onEvent: (e) => events.push(e) },
    );
    worker.on('cancelled', (job, error) => cancelled.push([job.id, error]));
    assert.ok(await until(async () => (await q.stats()).active === 1), 'the job runs');
    assert.equal(await q.cancel(id), true);
    assert.ok(await until(() => reasons.length === 1 && worker.counts.cancelled === 1, 30_000), 'the handler was stopped');
    await worker.close();
    assert.ok(reasons[0] instanceof EmqCancelledError, `${reasons[0]} is an EmqCancelledError`);
    assert.equal(reasons[0].code, 'EMQCANCELLED');
    assert.ok(handled.signal.aborted && handled.cancelled && !handled.leaseLost);
    assert.equal(cancelled.length, 1, "one 'cancelled' event");
    assert.equal(cancelled[0][0], id);
    assert.equal(cancelled[0][1], reasons[0]);
    assert.deepEqual(worker.counts, { acked: 0, failed: 0, retried: 0, lost: 0, cancelled: 1, timedOut: 0 });
    const row = await q.job(id);
    assert.deepEqual([row.set, row.state, row.error, row.cancelled, row.attempts], ['dead', 'dead', 'cancelled', 1, 1]);
    assert.equal((await q.stats()).dead, 1);
    // Its renewal was refused, then the worker sent nothing more for it: no settle at all.
    const kinds = events.filter((e) => e.id === id).map((e) => [e.kind, e.outcome]);
    assert.deepEqual(kinds.filter(([k]) => k !== 'renew' && k !== 'handler_end'), [['claim', 'ok'], ['handler_start', 'ok'], ['cancelled', 'ok']]);
    assert.deepEqual(kinds.filter(([k]) => k === 'renew').at(-1), ['renew', 'refused']);
    assert.match(events.find((e) => e.kind === 'cancelled').error, /^EmqCancelledError: EMQCANCELLED /);
    assert.deepEqual((await streamed('cancel-coop')).filter(([, job]) => job === id).map(([e]) => e), ['enqueued', 'claimed', 'cancelled']);
  });

  test('a handler that ignores its signal: the worker runs the next job, and the cancelled one is dead once', async () => {
    const q = new Queue(client, 'cancel-stubborn');
    await q.enableEvents();
    const stubborn = await q.enqueue('stubborn');
    const started = [];
    const events = [];
    let letGo;
    const worker = new Worker(
      q,
      async (job) => {
        started.push(job.payload);
        // Ignores `signal`: ends only when the test lets it.
        if (job.payload === 'stubborn') return new Promise((resolve) => (letGo = resolve));
        return 'next done';
      },
      { lease: 600, concurrency: 1, onEvent: (e) => events.push(e) },
    );
    assert.ok(await until(() => started.length === 1), 'the stubborn job runs');
    // Behind it, with the only slot taken: it waits in pending.
    const next = await q.enqueue('next');
    assert.equal(await q.cancel(stubborn), true);
    assert.ok(await until(() => worker.counts.acked === 1, 30_000), 'the next job ran and was acked');
    assert.deepEqual(started, ['stubborn', 'next']);
    assert.ok(letGo, 'the stubborn handler still runs');
    // It ends at last: what it returns is dropped, not sent.
    letGo('too late');
    await worker.close();
    assert.deepEqual(worker.counts, { acked: 1, failed: 0, retried: 0, lost: 0, cancelled: 1, timedOut: 0 });
    const stats = await q.stats();
    assert.deepEqual([stats.dead, stats.active, stats.pending], [1, 0, 0]);
    const row = await q.job(stubborn);
    assert.deepEqual([row.set, row.error, row.cancelled], ['dead', 'cancelled', 1]);
    assert.equal((await q.job(next)).state, 'done');
    const of = (id) => events.filter((e) => e.id === id).map((e) => e.kind);
    assert.ok(!of(stubborn).includes('settle'), 'no settle sent for the cancelled job');
    assert.deepEqual(of(stubborn).filter((k) => k === 'cancelled'), ['cancelled']);
    const order = events.map((e) => `${e.kind} ${e.id}`);
    assert.ok(order.indexOf(`cancelled ${stubborn}`) < order.indexOf(`handler_start ${next}`), 'the next job started once the slot was freed');
    const stream = await streamed('cancel-stubborn');
    assert.deepEqual(stream.filter(([, id]) => id === stubborn).map(([e]) => e), ['enqueued', 'claimed', 'cancelled']);
  });

  test('an ack or a fail that races the cancel is refused with EMQCANCELLED: not retried, not lost', async () => {
    const q = new Queue(client, 'cancel-race');
    const [acking, failing] = await q.enqueueMany([{ payload: 'ack' }, { payload: 'fail' }]);
    const release = new Map();
    const signals = new Map();
    // A lease of a minute: no renewal comes before the settles, which learn of the cancels.
    const worker = new Worker(
      q,
      (job, { signal }) => {
        signals.set(job.payload, signal);
        return new Promise((resolve, reject) => release.set(job.payload, job.payload === 'ack' ? resolve : reject));
      },
      { lease: 60_000, concurrency: 2 },
    );
    const cancelled = [];
    worker.on('cancelled', (job, error) => cancelled.push([job.id, error]));
    assert.ok(await until(() => release.size === 2), 'both run');
    assert.equal(await q.cancel(acking), true);
    assert.equal(await q.cancel(failing), true);
    release.get('ack')('done');
    release.get('fail')(new Error('broke'));
    assert.ok(await until(() => worker.counts.cancelled === 2, 30_000), 'both settles refused');
    await worker.close();
    assert.deepEqual(worker.counts, { acked: 0, failed: 0, retried: 0, lost: 0, cancelled: 2, timedOut: 0 });
    assert.deepEqual(cancelled.map(([id]) => id).sort(), [acking, failing].sort());
    for (const [, error] of cancelled) assert.ok(error instanceof EmqCancelledError);
    for (const signal of signals.values()) assert.ok(signal.reason instanceof EmqCancelledError);
    for (const id of [acking, failing]) {
      const row = await q.job(id);
      assert.deepEqual([row.set, row.error, row.attempts], ['dead', 'cancelled', 1]);
    }
    assert.equal((await q.stats()).dead, 2);
  });

  test('a cancelled job requeued runs again under a new token and is acked', async () => {
    const q = new Queue(client, 'cancel-requeue');
    const id = await q.enqueue('x');
    const attempts = [];
    const worker = new Worker(
      q,
      (job, { signal }) => {
        attempts.push(job.attempt);
        if (attempts.length > 1) return 'second';
        return new Promise((resolve) => signal.addEventListener('abort', () => resolve('stopped')));
      },
      { lease: 600, concurrency: 1 },
    );
    assert.ok(await until(() => attempts.length === 1));
    assert.equal(await q.cancel(id), true);
    assert.ok(await until(() => worker.counts.cancelled === 1, 30_000));
    assert.equal(await q.requeue(id), true);
    assert.ok(await until(() => worker.counts.acked === 1, 30_000));
    await worker.close();
    assert.equal(attempts.length, 2);
    assert.ok(attempts[1] > attempts[0], `a new token: ${attempts}`);
    assert.deepEqual(worker.counts, { acked: 1, failed: 0, retried: 0, lost: 0, cancelled: 1, timedOut: 0 });
    const row = await q.job(id);
    assert.deepEqual([row.state, row.result, row.cancelled], ['done', 'second', 1]);
  });
});
