// A worker against the mistakes of the code around it: a result or progress larger than the
// server takes, values that cannot be encoded, a backoff or an 'error' listener that throws,
// options that are not numbers, a Retry out of bounds, a batch with a bad job at its end, and a
// close() while the server does not answer. Each costs no process, and no other job its run.
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { EmqPayloadError, Queue, Retry, Worker } from '../src/index.js';
import { passing } from '../src/retry.js';
import { Server, until } from './support/server.js';

/** @type {Server} */
let server;
let client;
before(async () => {
  server = await Server.start(['--emq.max-payload-bytes', '1000']);
  client = await server.connect();
});
after(() => server.stop());

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const big = 'x'.repeat(2000);

/** Resolves once `f()` holds (bounded wait), failing with `what` otherwise. */
async function eventually(f, what) {
  assert.ok(await until(f, 30_000), what());
}

describe('Worker guards', () => {
  test('a result larger than the server takes fails its own job, and its batch is acked', async () => {
    const q = new Queue(client, 'bigresult');
    const ids = await q.enqueueMany(Array.from({ length: 5 }, (_, n) => ({ payload: { n } })));
    const runs = new Map();
    const worker = new Worker(
      q,
      async (job) => {
        runs.set(job.id, (runs.get(job.id) ?? 0) + 1);
        await sleep(20); // the five end together: one EMQ.MACK
        return job.data.n === 2 && job.attempt === 1 ? big : 'ok';
      },
      { concurrency: 5, onEvent: undefined },
    );
    const failures = [];
    worker.on('failed', (job, error) => failures.push([job.id, error]));
    worker.on('error', () => {});
    await eventually(() => worker.counts.acked === 5, () => JSON.stringify(worker.counts));
    await worker.close();
    assert.equal(worker.counts.failed, 1);
    assert.equal(failures.length, 1);
    assert.equal(failures[0][0], ids[2]);
    assert.ok(failures[0][1] instanceof EmqPayloadError);
    assert.match(failures[0][1].message, /result \(2000 bytes\)/);
    assert.deepEqual(ids.map((id) => runs.get(id)), [1, 1, 2, 1, 1], 'the others ran once');
  });

  /** Runs one job whose handler sets `progress` and outlives its lease: it must run once, its
   * lease kept by renewals, and the progress's refusal reported as `refused`. */
  async function progressRun(name, progress, refused) {
    const q = new Queue(client, name);
    await q.enqueue('p');
    let runs = 0;
    const errors = [];
    const worker = new Worker(
      q,
      async (job) => {
        runs++;
        job.progress = progress;
        await sleep(1500); // past the lease: only renewals keep it
      },
      { concurrency: 2, lease: 600 },
    );
    worker.on('error', (e) => errors.push(e));
    await eventually(() => worker.counts.acked === 1, () => JSON.stringify(worker.counts));
    await worker.close();
    assert.equal(runs, 1, 'run once: its lease never lapsed');
    assert.equal(worker.counts.lost, 0);
    assert.ok(errors.some((e) => e instanceof refused), 'the refusal reported');
  }

  test('progress larger than the server takes is dropped, and the lease is kept', () => progressRun('bigprogress', big, EmqPayloadError));

  test('progress that cannot be encoded is reported, and renewals go on', () => progressRun('bigintprogress', 10n, TypeError));

  test("a backoff that throws is reported, and the server's backoff retries the job", async () => {
    const q = new Queue(client, 'badbackoff');
    const id = await q.enqueue('b');
    const errors = [];
    const worker = new Worker(
      q,
      async (job) => {
        if (job.attempt === 1) throw new Error('first attempt');
      },
      {
        backoff: () => {
          throw new Error('a broken backoff');
        },
      },
    );
    worker.on('error', (e) => errors.push(e));
    await eventually(() => worker.counts.acked === 1, () => JSON.stringify(worker.counts));
    await worker.close();
    assert.equal(worker.counts.failed, 1);
    assert.ok(errors.some((e) => e instanceof Error && e.message === 'a broken backoff'));
    assert.equal((await q.job(id))?.attempts, 2);
  });

  test('a thrown object without a string form fails its job', async () => {
    const q = new Queue(client, 'nullproto');
    const id = await q.enqueue('n');
    const worker = new Worker(q, async (job) => {
      if (job.attempt === 1) throw Object.create(null);
    });
    await eventually(() => worker.counts.acked === 1, () => JSON.stringify(worker.counts));
    await worker.close();
    assert.equal(worker.counts.failed, 1);
    assert.equal((await q.job(id))?.attempts, 2);
  });

  test("an 'error' listener that throws costs no process and no job", async () => {
    const q = new Queue(client, 'throwinglistener');
    await q.enqueue('l');
    const worker = new Worker(q, async () => 10n); // a result JSON cannot write: reported
    let heard = 0;
    worker.on('error', () => {
      heard++;
      throw new Error('a listener that throws');
    });
    await eventually(() => worker.counts.acked === 1, () => JSON.stringify(worker.counts));
    await worker.close();
    assert.ok(heard >= 1);
  });

  test("a socket's error for a node gone (a write to one just killed) is waited out, not fatal", () => {
    for (const code of ['EPIPE', 'ECONNRESET', 'ECONNREFUSED', 'ETIMEDOUT', 'EHOSTUNREACH']) {
      const e = Object.assign(new Error(`write ${code}`), { code, syscall: 'write' });
      assert.ok(passing(e), code);
    }
    assert.ok(!passing(Object.assign(new Error('no such file'), { code: 'ENOENT' })));
  });

  test('a Retry out of bounds is refused where it is made', () => {
    for (const after of [NaN, -1, 4e10, Infinity]) assert.throws(() => new Retry(after), RangeError);
    assert.equal(new Retry(0).after, 0);
    assert.equal(new Retry(31_536_000_000).after, 31_536_000_000);
  });

  test('numeric options that are not finite numbers are refused; a batch is whole', () => {
    const q = new Queue(client, 'options');
    for (const name of ['concurrency', 'lease', 'block', 'batch', 'renewEvery', 'shutdownTimeout']) {
      assert.throws(() => new Worker(q, async () => {}, { [name]: NaN, autorun: false }), TypeError, name);
      assert.throws(() => new Worker(q, async () => {}, { [name]: '5', autorun: false }), TypeError, name);
    }
    assert.equal(new Worker(q, async () => {}, { batch: 2.5, autorun: false }).batch, 2);
  });

  test('enqueueMany checks every job before it sends any', async () => {
    const q = new Queue(client, 'manychecked');
    const good = Array.from({ length: 2400 }, (_, n) => ({ payload: n }));
    const headers = Object.fromEntries(Array.from({ length: 33 }, (_, n) => [`h${n}`, 'v']));
    await assert.rejects(q.enqueueMany([...good, { payload: 'h', headers }]), RangeError);
    // A key, a value and a size the server would refuse.
    const wide = Object.fromEntries(Array.from({ length: 30 }, (_, n) => [`k${n}`, 'x'.repeat(600)]));
    for (const bad of [{ 'a key': 'v' }, { k: 'a\nb' }, { k: 'x'.repeat(8193) }, wide]) {
      await assert.rejects(q.enqueueMany([...good, { payload: 'h', headers: bad }]), RangeError, JSON.stringify(Object.keys(bad)));
    }
    await assert.rejects(q.enqueueMany([...good, { payload: 'p', priority: 2.5 }]), RangeError);
    await assert.rejects(q.enqueueMany([...good, { payload: 1n }]), TypeError);
    for (const chunk of [NaN, 2.5, Infinity]) await assert.rejects(q.enqueueMany(good, { chunk }), RangeError, String(chunk));
    assert.equal((await q.stats()).pending, 0, 'nothing written');
  });

  test('close() returns within its timeout while the server does not answer a claim', async () => {
    const alone = await Server.start();
    try {
      const c = await alone.connect();
      c.on('error', () => {});
      const q = new Queue(c, 'outage');
      const worker = new Worker(q, async () => {}, { block: 200, shutdownTimeout: 300 });
      worker.on('error', () => {});
      // A claim has been answered, so the next is in flight when the server stops.
      await eventually(async () => Number((await alone.cmd('INFO', 'commandstats')).match(/cmdstat_emq\.claim:calls=(\d+)/)?.[1] ?? 0) >= 2, () => 'no claim');
      alone.process.kill('SIGSTOP');
      await worker.close();
      assert.ok(worker.closed);
    } finally {
      alone.process.kill('SIGCONT');
      await alone.stop();
    }
  });
});
