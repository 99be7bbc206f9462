// The echomq-worker CLI as a child process: a handler module's default export (or
// module.exports) works the queue, and SIGTERM mid-run loses and repeats nothing.
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { after, before, test } from 'node:test';
import { Queue } from '../src/index.js';
import { Server, until } from './support/server.js';

const HERE = dirname(fileURLToPath(import.meta.url));
const CLI = join(HERE, '../bin/echomq-worker.js');

/** @type {Server} */
let server;
let client;
let dir;
before(async () => {
  server = await Server.start();
  client = await server.connect();
  dir = mkdtempSync(join(tmpdir(), 'echomq-cli-'));
});
after(async () => {
  await server.stop();
  rmSync(dir, { recursive: true, force: true });
});

/** The CLI working `queue` with `handler`; its exit code and the counts it prints. */
function cli(handler, queue, log, extra = []) {
  const child = spawn(process.execPath, [CLI, join(HERE, 'fixtures', handler), '--url', server.url, '--queue', queue, ...extra], {
    env: { ...process.env, ECHOMQ_TEST_LOG: log },
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  let out = '';
  child.stdout.on('data', (d) => (out += d));
  const exited = new Promise((resolve) => child.once('exit', (code) => resolve({ code, counts: JSON.parse(out.trim().split('\n').pop() ?? '{}') })));
  return { child, exited };
}

const starts = (log) => {
  try {
    return readFileSync(log, 'utf8').trim().split('\n').filter(Boolean).map((l) => l.split(' '));
  } catch {
    return [];
  }
};

test('SIGTERM mid-run: the running jobs finish and are acked; nothing is lost or repeated', async () => {
  const q = new Queue(client, 'term');
  const ids = await q.enqueueMany(Array.from({ length: 30 }, () => ({ payload: { ms: 150 } })));
  const log = join(dir, 'term.log');
  const first = cli('logging-handler.js', 'term', log, ['--concurrency', '4']);
  assert.ok(await until(() => starts(log).length >= 6));
  first.child.kill('SIGTERM');
  const { code, counts } = await first.exited;
  assert.equal(code, 0);
  const begun = starts(log);
  assert.deepEqual(counts, { acked: begun.length, failed: 0, retried: 0, lost: 0, cancelled: 0, timedOut: 0 });
  let stats = await q.stats();
  assert.equal(stats.active, 0, 'nothing left leased');
  assert.equal(stats.pending, 30 - begun.length);

  // A second worker takes the rest; each job ran once, on its first attempt.
  const second = cli('logging-handler.js', 'term', log, ['--concurrency', '4']);
  assert.ok(await until(async () => starts(log).length === 30 && (await q.stats()).active === 0, 30_000));
  second.child.kill('SIGINT');
  assert.equal((await second.exited).code, 0);
  const all = starts(log);
  assert.equal(all.length, 30);
  assert.deepEqual(all.map(([id]) => id).sort(), [...ids].sort());
  assert.deepEqual(new Set(all.map(([, attempt]) => attempt)), new Set(['1']));
  stats = await q.stats();
  assert.deepEqual([stats.pending, stats.active, stats.scheduled, stats.dead], [0, 0, 0, 0]);
  const row = await q.job(ids[0]);
  assert.equal(row.state, 'done');
  assert.equal(row.result, JSON.stringify({ id: ids[0] }));
});

test('a CommonJS handler module works, its string result kept as it is', async () => {
  const q = new Queue(client, 'cjs');
  const id = await q.enqueue('hello');
  const run = cli('commonjs-handler.cjs', 'cjs', join(dir, 'cjs.log'));
  assert.ok(await until(async () => (await q.job(id))?.state === 'done'));
  run.child.kill('SIGTERM');
  const { code, counts } = await run.exited;
  assert.equal(code, 0);
  assert.equal(counts.acked, 1);
  assert.equal((await q.job(id)).result, 'seen hello');
});

test('bad usage exits 2 with the usage', async () => {
  const run = spawn(process.execPath, [CLI, '--url', server.url], { stdio: ['ignore', 'ignore', 'pipe'] });
  let err = '';
  run.stderr.on('data', (d) => (err += d));
  const code = await new Promise((resolve) => run.once('exit', resolve));
  assert.equal(code, 2);
  assert.match(err, /usage: echomq-worker/);
});
