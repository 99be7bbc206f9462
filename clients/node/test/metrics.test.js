// A queue's metrics against a real server (`Queue.metrics`, docs/observability.md): a worker's
// jobs, each handled for at least 300 ms, are counted as enqueued, claimed and acked, and their
// run times all lie past the 250 ms bucket; a pending job shows its age, nothing pending none.
// Conditions are waited for, never timed.
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { Queue, Worker, quantileBound } from '../src/index.js';
import { Server, until } from './support/server.js';

/** @type {Server} */
let server;
let client;
before(async () => {
  server = await Server.start();
  client = await server.connect();
});
after(() => server.stop());

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

test("a worker's jobs are counted and their run times lie past their sleep", async () => {
  const q = new Queue(client, 'metered');
  await q.enqueueMany([0, 1, 2].map((n) => ({ payload: { n } })));
  assert.notEqual((await q.metrics()).oldestPendingMs, null);
  const worker = new Worker(q, async () => sleep(300), { concurrency: 3 });
  const running = worker.run();
  try {
    assert.ok(await until(async () => (await q.metrics()).events.acked === 3, 30_000), 'three acks');
  } finally {
    await worker.close();
    await running;
  }
  const m = await q.metrics();
  assert.deepEqual([m.events.enqueued, m.events.claimed, m.events.acked], [3, 3, 3]);
  const acked = m.run.acked;
  assert.equal(acked.count, 3);
  // None ran under its 300 ms of sleep: every one is past the 250 ms bucket.
  assert.deepEqual(acked.buckets.find(([le]) => le === 250), [250, 0]);
  assert.ok(acked.sumMs >= 900, JSON.stringify(acked));
  assert.ok((quantileBound(acked, 0.5) ?? 0) > 250, JSON.stringify(acked));
  assert.equal(m.wait.count, 3);
  assert.equal(m.endToEnd.count, 3);
  assert.equal(m.oldestPendingMs, null);
});
