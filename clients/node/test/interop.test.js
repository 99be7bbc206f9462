// Node, Python and Rust producers and workers share a queue: Node enqueues and a Python worker
// acks; Python enqueues and the Node worker acks; both enqueue into one queue that a Node and a
// Python worker work together, each job once; the Rust crate's drain example, where built;
// and the Rust crate's producer (through `emq enqueue`) for the Node worker.
// ECHOMQ_PYTHON: a Python with the `echomq` package (default <repo>/target/py/bin/python);
// ECHOMQ_DRAIN: the Rust example (default <repo>/target/debug/examples/drain, which `make test`
// builds, or the release one `make bench-clients` builds).
import assert from 'node:assert/strict';
import { execFile, spawn } from 'node:child_process';
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { after, before, test } from 'node:test';
import { Queue, Worker } from '../src/index.js';
import { ROOT, Server, until } from './support/server.js';

const PYTHON = process.env.ECHOMQ_PYTHON ?? join(ROOT, 'target/py/bin/python');
const DRAIN =
  process.env.ECHOMQ_DRAIN ??
  ['target/debug/examples/drain', 'target/release/examples/drain'].map((p) => join(ROOT, p)).find(existsSync) ??
  join(ROOT, 'target/debug/examples/drain');
const run = promisify(execFile);
// ECHOMQ_EMQ: the console (`emq`, whose `enqueue` is the Rust crate's Queue); default
// <repo>/target/debug/emq, which `make test` builds.
const EMQ = process.env.ECHOMQ_EMQ ??
  ['target/debug/emq', 'target/release/emq'].map((p) => join(ROOT, p)).find(existsSync) ??
  join(ROOT, 'target/debug/emq');

/** A Python worker: acks `n` jobs of `queue` (0: until the queue has none pending or active),
 * their payloads as JSON on stdout. */
const PY_WORKER = `
import json, sys, threading, time, redis, echomq
port, queue, n = int(sys.argv[1]), sys.argv[2], int(sys.argv[3])
seen = []
def handle(job):
    seen.append(json.loads(job.payload))
    return b"py"
w = echomq.Worker(redis.Redis(port=port), queue, handle, concurrency=4)
t = threading.Thread(target=w.run, daemon=True)
t.start()
def drained():
    s = echomq.Queue(redis.Redis(port=port), queue).stats()
    return s["pending"] + s["active"] == 0
while (w.counts["acked"] < n) if n else not drained():
    time.sleep(0.01)
w.stop(); t.join(10)
print(json.dumps(seen))
`;
/** A Python producer: enqueues `n` JSON payloads, their ids as JSON on stdout. */
const PY_PRODUCER = `
import json, sys, redis, echomq
port, queue, n = int(sys.argv[1]), sys.argv[2], int(sys.argv[3])
q = echomq.Queue(redis.Redis(port=port), queue, serializer=echomq.Json())
print(json.dumps(q.enqueue_many({"from": "python", "n": i} for i in range(n))))
`;

/** @type {Server} */
let server;
let client;
before(async () => {
  server = await Server.start();
  client = await server.connect();
});
after(() => server.stop());

const python = existsSync(PYTHON) ? false : `no Python with echomq at ${PYTHON} (set ECHOMQ_PYTHON)`;

test('Node enqueues, a Python worker acks', { skip: python }, async () => {
  const q = new Queue(client, 'node-to-python');
  const ids = await q.enqueueMany(Array.from({ length: 20 }, (_, n) => ({ payload: { from: 'node', n } })));
  const { stdout } = await run(PYTHON, ['-c', PY_WORKER, String(server.port), q.name, '20'], { timeout: 60_000 });
  const seen = JSON.parse(stdout);
  assert.deepEqual(seen.map((p) => p.n).sort((a, b) => a - b), [...Array(20).keys()]);
  for (const id of ids) {
    const row = await q.job(id);
    assert.deepEqual([row.state, row.attempts, row.result], ['done', 1, 'py']);
  }
});

test('Python enqueues, the Node worker acks', { skip: python }, async () => {
  const q = new Queue(client, 'python-to-node');
  const { stdout } = await run(PYTHON, ['-c', PY_PRODUCER, String(server.port), q.name, '20'], { timeout: 60_000 });
  const ids = JSON.parse(stdout);
  const seen = [];
  const worker = new Worker(q, (job) => {
    seen.push(job.data);
    return 'node';
  });
  assert.ok(await until(() => worker.counts.acked === 20));
  await worker.close();
  assert.deepEqual(seen.map((p) => p.from), Array(20).fill('python'));
  for (const id of ids) assert.equal((await q.job(id)).result, 'node');
});

test('both enqueue into one queue that a Node and a Python worker share: each job once', { skip: python }, async () => {
  const q = new Queue(client, 'shared');
  const nodeIds = await q.enqueueMany(Array.from({ length: 100 }, (_, n) => ({ payload: { from: 'node', n } })));
  const { stdout } = await run(PYTHON, ['-c', PY_PRODUCER, String(server.port), q.name, '100'], { timeout: 60_000 });
  const pyIds = JSON.parse(stdout);
  const seen = [];
  // Both work until the queue is drained.
  const py = run(PYTHON, ['-c', PY_WORKER, String(server.port), q.name, '0'], { timeout: 60_000 });
  const worker = new Worker(q, (job) => void seen.push(job.id), { concurrency: 4 });
  const { stdout: pyOut } = await py;
  assert.ok(await until(async () => {
    const s = await q.stats();
    return s.pending + s.active === 0;
  }));
  await worker.close();
  const pySeen = JSON.parse(pyOut).length;
  assert.equal(seen.length + pySeen, 200, `node ${seen.length}, python ${pySeen}`);
  assert.equal(new Set(seen).size, seen.length);
  for (const id of [...nodeIds, ...pyIds]) {
    const row = await q.job(id);
    assert.deepEqual([row.state, row.attempts], ['done', 1]);
  }
});

test('Node enqueues, the Rust worker (clients/rust/examples/drain.rs) acks', { skip: existsSync(DRAIN) ? false : `no Rust drain example at ${DRAIN} (set ECHOMQ_DRAIN)` }, async () => {
  const q = new Queue(client, 'node-to-rust');
  const ids = await q.enqueueMany(Array.from({ length: 50 }, () => ({ payload: '{}' })));
  const child = spawn(DRAIN, [String(server.port), q.name, '50', '8'], { stdio: 'ignore' });
  const code = await new Promise((resolve) => child.once('exit', resolve));
  assert.equal(code, 0);
  for (const id of ids) assert.equal((await q.job(id)).state, 'done');
});

test('Rust enqueues (emq enqueue, on the crate\'s Queue), the Node worker acks', { skip: existsSync(EMQ) ? false : `no emq binary at ${EMQ} (set ECHOMQ_EMQ)` }, async () => {
  const q = new Queue(client, 'rust-to-node');
  const ids = [];
  for (let n = 0; n < 20; n++) {
    const { stdout } = await run(EMQ, ['--url', `redis://127.0.0.1:${server.port}`, 'enqueue', q.name, JSON.stringify({ n })]);
    ids.push(stdout.trim().split(/\s+/).pop());
  }
  const seen = [];
  const worker = new Worker(q, async (job) => {
    seen.push(job.data.n);
  }, { concurrency: 4 });
  assert.ok(await until(() => worker.counts.acked >= 20, 30_000), `acked ${worker.counts.acked} of 20`);
  await worker.close();
  assert.deepEqual([...seen].sort((a, b) => a - b), Array.from({ length: 20 }, (_, n) => n));
  for (const id of ids) assert.deepEqual(((await q.job(id)) ?? {}).state, 'done', id);
});
