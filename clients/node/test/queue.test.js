// The Queue's calls against a real server: enqueue and its options, enqueueMany in chunks,
// looking (job, jobs, stats), operating (pause, purge, requeue, cancel, limit, cron), events;
// groups.
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { createClient } from 'redis';
import { Queue, Worker } from '../src/index.js';
import { Server, until } from './support/server.js';

/** The ms of a row's `deadline`, `<unix-ms>:<token>`. */
const deadlineMs = (row) => Number(row.deadline.split(':')[0]);

/** @type {Server} */
let server;
let client;
before(async () => {
  server = await Server.start();
  client = await server.connect();
});
after(() => server.stop());

async function calls(command) {
  const stats = String(await server.cmd('INFO', 'commandstats'));
  const m = new RegExp(`cmdstat_${command.replace('.', '\\.')}:calls=(\\d+)`).exec(stats);
  return m ? Number(m[1]) : 0;
}

describe('Queue', () => {
  test('enqueue: minted or given ids, JSON or raw payloads, idempotent on its id', async () => {
    const q = new Queue(client, 'enq');
    const id = await q.enqueue({ to: 'ann' });
    assert.match(id, /^JOB[0-9A-Za-z]{11}$/);
    assert.equal((await q.job(id)).payload, '{"to":"ann"}');
    assert.equal(await q.enqueue('raw text', { id: 'JOB00000000001' }), 'JOB00000000001');
    assert.equal(await q.enqueue('again', { id: 'JOB00000000001' }), 'JOB00000000001');
    assert.equal((await q.job('JOB00000000001')).payload, 'raw text');
    assert.equal((await q.job(await q.enqueue(Buffer.from([0x68, 0x69])))).payload, 'hi');
    assert.equal((await q.stats()).pending, 3);
  });

  test('enqueue: delay and at schedule, priority orders the claims', async () => {
    const q = new Queue(client, 'when');
    const later = await q.enqueue('later', { delay: 60_000 });
    const at = await q.enqueue('at', { at: new Date(Date.now() + 120_000) });
    const low = await q.enqueue('low', { priority: 5 });
    const high = await q.enqueue('high', { priority: -5 });
    assert.equal((await q.job(later)).set, 'scheduled');
    assert.equal((await q.job(at)).set, 'scheduled');
    const claimed = await q.call('EMQ.CLAIM', 'COUNT', 2);
    assert.deepEqual(claimed.map((j) => j[0]), [high, low]);
  });

  test('enqueue: a unique key returns the holder while it is held', async () => {
    const q = new Queue(client, 'uniq');
    const first = await q.enqueue('welcome ann', { unique: 'welcome:ann', uniqueFor: 60_000 });
    const second = await q.enqueue('welcome ann', { unique: 'welcome:ann', uniqueFor: 60_000 });
    assert.equal(second, first);
    assert.equal((await q.stats()).pending, 1);
    await assert.rejects(q.enqueue('x', { uniqueFor: 5 }), TypeError);
  });

  test('enqueue: a timeout is the row\'s, and a claim of it writes the attempt\'s deadline', async () => {
    const q = new Queue(client, 'timed');
    const id = await q.enqueue('x', { timeout: 60_000 });
    const plain = await q.enqueue('y');
    assert.equal((await q.job(id)).timeout, 60_000);
    assert.equal((await q.job(plain)).timeout, undefined);
    const claimed = await q.call('EMQ.CLAIM', 'COUNT', 2, 'LEASE', 120_000);
    assert.deepEqual(claimed.map((j) => j[0]), [id, plain]);
    const row = await q.job(id);
    assert.match(row.deadline, /^\d+:1$/, 'the deadline, and the token of its attempt');
    // The lease ends at the deadline at the latest, though the claim asked for two minutes.
    assert.ok(Number(await server.cmd('ZSCORE', 'emq:{timed}:active', id)) <= deadlineMs(row));
    assert.equal((await q.job(plain)).deadline, undefined, 'no deadline without a timeout');
    await assert.rejects(q.enqueue('x', { timeout: -1 }), RangeError);
  });

  test('enqueueMany: EMQ.MENQUEUE in bounded chunks, ids in order, priorities kept', async () => {
    await server.cmd('CONFIG', 'RESETSTAT');
    const q = new Queue(client, 'many');
    const jobs = Array.from({ length: 2500 }, (_, n) => ({ payload: { n } }));
    const ids = await q.enqueueMany(jobs);
    assert.equal(ids.length, 2500);
    assert.equal(new Set(ids).size, 2500);
    assert.deepEqual([...ids].sort(), ids, 'minted in order');
    assert.equal(await calls('emq.menqueue'), 3);
    assert.equal((await q.stats()).pending, 2500);
    const urgent = await q.enqueueMany([{ payload: 'a', priority: -1 }, { payload: 'b', id: 'JOB00000000002' }], { chunk: 1 });
    assert.equal(urgent[1], 'JOB00000000002');
    assert.equal(await calls('emq.menqueue'), 5);
    assert.equal((await q.job(urgent[0])).priority, -1);
  });

  test('job, jobs and stats', async () => {
    const q = new Queue(client, 'look');
    assert.equal(await q.job('JOB00000000009'), null);
    const ids = await q.enqueueMany(Array.from({ length: 5 }, (_, n) => ({ payload: `p${n}` })));
    const seen = [];
    let cursor = '0';
    let pages = 0;
    do {
      const page = await q.jobs('pending', { cursor, count: 2, withPayloads: true });
      seen.push(...page.jobs);
      cursor = page.cursor;
      pages++;
    } while (cursor !== '0');
    assert.equal(pages, 3);
    assert.deepEqual(seen.map((j) => j.id), ids);
    assert.deepEqual(seen.map((j) => j.payload), ['p0', 'p1', 'p2', 'p3', 'p4']);
    assert.deepEqual(Object.keys(seen[0]), ['id', 'score', 'attempts', 'payload', 'error']);
    const stats = await q.stats();
    assert.deepEqual([stats.pending, stats.active, stats.scheduled, stats.dead, stats.paused], [5, 0, 0, 0, 0]);
  });

  test('pause and resume', async () => {
    const q = new Queue(client, 'pause');
    assert.equal(await q.pause(), true);
    assert.equal(await q.pause(), false);
    await q.enqueue('x');
    assert.deepEqual(await q.call('EMQ.CLAIM'), []);
    assert.equal((await q.stats()).paused, 1);
    assert.equal(await q.resume(), true);
    assert.equal(await q.resume(), false);
    assert.equal((await q.call('EMQ.CLAIM')).length, 1);
  });

  test('purge loops EMQ.PURGE ... COUNT until the set is empty', async () => {
    await server.cmd('CONFIG', 'RESETSTAT');
    const q = new Queue(client, 'purge');
    await q.enqueueMany(Array.from({ length: 25 }, () => ({ payload: 'x' })));
    assert.equal(await q.purge('pending', { count: 10 }), 25);
    await assert.rejects(q.purge('pending', { count: 0 }), RangeError);
    assert.equal(await calls('emq.purge'), 3);
    assert.equal((await q.stats()).pending, 0);
    assert.equal(await q.purge('dead'), 0);
  });

  test('cancel, requeue and requeueDead', async () => {
    await server.cmd('CONFIG', 'SET', 'emq.max-attempts', '1');
    try {
      const q = new Queue(client, 'ops');
      const waiting = await q.enqueue('x', { delay: 60_000 });
      assert.equal(await q.cancel(waiting), true);
      assert.equal(await q.cancel(waiting), false);
      const ids = await q.enqueueMany([{ payload: 'a' }, { payload: 'b' }, { payload: 'c' }]);
      const worker = new Worker(q, () => {
        throw new Error('no');
      });
      assert.ok(await until(async () => (await q.stats()).dead === 3));
      await worker.close();
      assert.equal(await q.requeue(ids[0]), true);
      assert.equal(await q.requeue(ids[0]), false);
      assert.equal(await q.requeueDead({ count: 1 }), 1);
      assert.equal(await q.requeueDead(), 1);
      const stats = await q.stats();
      assert.deepEqual([stats.pending, stats.dead], [3, 0]);
      assert.equal((await q.job(ids[0])).attempts, 0);
    } finally {
      await server.cmd('CONFIG', 'SET', 'emq.max-attempts', '25');
    }
  });

  test('limit sets, reports and removes the claim limits', async () => {
    const q = new Queue(client, 'limits');
    const set = await q.limit({ concurrency: 3, rate: 100, per: 60_000 });
    assert.deepEqual([set.concurrency, set.rate, set['rate-per']], [3, 100, 60_000]);
    assert.deepEqual(await q.limit(), set);
    const some = await q.limit({ concurrency: null });
    assert.deepEqual([some.concurrency, some.rate], [null, 100]);
    const none = await q.limit({ off: true });
    assert.deepEqual([none.concurrency, none.rate], [null, null]);
    assert.equal((await q.stats()).concurrency, null);
  });

  test('limit sets, reports and removes the queue\'s timeout, which times its jobs without one', async () => {
    const q = new Queue(client, 'limit-timeout');
    const set = await q.limit({ timeout: 60_000, concurrency: 2 });
    assert.deepEqual([set.timeout, set.concurrency], [60_000, 2]);
    assert.equal((await q.limit()).timeout, 60_000);
    assert.equal((await q.stats()).timeout, 60_000);
    const id = await q.enqueue('x');
    await q.call('EMQ.CLAIM', 'COUNT', 1, 'LEASE', 120_000);
    const row = await q.job(id);
    assert.equal(row.timeout, undefined, 'the queue\'s timeout is not written into the row');
    assert.match(row.deadline, /^\d+:1$/, 'the deadline, and the token of its attempt');
    const removed = await q.limit({ timeout: null });
    assert.deepEqual([removed.timeout, removed.concurrency], [null, 2]);
    await q.limit({ timeout: 30_000 });
    const none = await q.limit({ off: true });
    assert.deepEqual([none.timeout, none.concurrency], [null, null]);
    const later = await q.enqueue('y');
    await q.call('EMQ.CLAIM', 'COUNT', 1, 'LEASE', 120_000);
    assert.equal((await q.job(later)).deadline, undefined, 'removed, it times nothing claimed after');
  });

  test('cron, crons and uncron', async () => {
    const q = new Queue(client, 'crons');
    const next = await q.cron('nightly', { report: 'daily' }, { spec: '0 3 * * *' });
    assert.ok(next > Date.now());
    await q.cron('beat', 'ping', { every: 60_000, priority: -1 });
    const all = await q.crons();
    assert.deepEqual(all.map((c) => c.name), ['beat', 'nightly']);
    assert.equal(all[1].payload, '{"report":"daily"}');
    assert.equal(all[0].every, 60_000);
    assert.equal(await q.uncron('beat'), true);
    assert.equal(await q.uncron('beat'), false);
    assert.equal((await q.crons()).length, 1);
    await assert.rejects(q.cron('x', 'y', {}), TypeError);
  });

  test('a user not allowed EMQ.WIDTH has ordinary queues: cron, crons, uncron, jobs, groups and metrics go to the queue\'s own name', async () => {
    await server.cmd('ACL', 'SETUSER', 'widthless', 'on', '>pw', '+@all', '-emq.width', '~*');
    const user = createClient({ url: `redis://widthless:pw@127.0.0.1:${server.port}` });
    await user.connect();
    try {
      const q = new Queue(user, 'no-width');
      await assert.rejects(q.width(), /NOPERM/);
      const id = await new Queue(client, 'no-width').enqueue('x');
      await new Queue(client, 'no-width').enqueue('y', { group: 'acme' });
      // Each call a Queue of its own: each reads the width afresh (crons, uncron, a walk from
      // 0) or once (cron, metrics), and takes the refusal for width 0.
      const fresh = () => new Queue(user, 'no-width');
      assert.deepEqual((await fresh().jobs('pending')).jobs.map((j) => j.id), [id]);
      assert.deepEqual((await fresh().groups()).groups.map((g) => g.group), ['acme']);
      assert.ok((await fresh().cron('beat', 'ping', { every: 60_000 })) > 0);
      assert.deepEqual((await fresh().crons()).map((c) => c.name), ['beat']);
      assert.equal((await fresh().metrics()).events.enqueued, 2);
      const known = fresh();
      assert.equal(await known.uncron('beat'), true);
      assert.equal(known.knownWidth, 0);
      // A Queue that knows its width reads it again at a walk's start, and takes the refusal again.
      assert.deepEqual((await known.jobs('pending')).jobs.map((j) => j.id), [id]);
      assert.deepEqual(await known.crons(), []);
    } finally {
      await user.disconnect();
    }
  });

  test('events: an async iterator over the queue event stream', async () => {
    const q = new Queue(client, 'ev');
    assert.equal(await q.enableEvents({ maxlen: 1000 }), true);
    const controller = new AbortController();
    const seen = [];
    const reading = (async () => {
      for await (const e of q.events({ from: '0', block: 100, signal: controller.signal })) {
        seen.push(e);
        if (seen.length === 3) break;
      }
    })();
    const id = await q.enqueue('x');
    const worker = new Worker(q, () => 'ok');
    await reading;
    await worker.close();
    assert.deepEqual(seen.map((e) => [e.event, e.id]), [['enqueued', id], ['claimed', id], ['acked', id]]);
    assert.equal(seen[1].attempt, 1);
    // From `$` (the newest entry when the reading starts): what comes after it, nothing before
    // it, after reads that waited for nothing (whether the enqueue lands between two reads is
    // the scheduler's; the Rust client's test makes it land there).
    await server.cmd('CONFIG', 'RESETSTAT');
    const later = (async () => {
      for await (const e of q.events({ block: 50 })) return e;
    })();
    assert.ok(await until(async () => (await calls('xread')) >= 2), 'a read waited for nothing, and another began');
    const second = await q.enqueue('y');
    const next = await later;
    assert.deepEqual([next?.event, next?.id], ['enqueued', second]);
    assert.equal(await q.disableEvents(), true);
  });
});

/** The fairness tests' queues: a long group, then a short one enqueued behind it. */
const LONG = 30;
const SHORT = 3;

/** Enqueues `count` jobs to `group`, payloads `<group><n>`; their ids, in order. */
async function enqueueTo(q, group, count) {
  const ids = [];
  for (let n = 0; n < count; n++) ids.push(await q.enqueue(`${group}${n}`, { group }));
  return ids;
}

/** `order` claimed `a` then `b` fairly: every job of `b` among the first 2 × its count, and
 * `a`'s jobs in their order. */
function assertFair(order, a, b) {
  assert.deepEqual([...order].sort(), [...a, ...b].sort(), 'each job once');
  for (const id of b) assert.ok(order.indexOf(id) < 2 * b.length, `${id} of b at ${order.indexOf(id)}: ${order}`);
  assert.deepEqual(order.filter((id) => a.includes(id)), a, 'a in its order');
}

/** One claim of up to `count` jobs (a lease of a minute): each job's id and token, in order. */
async function claim(q, count = 100) {
  const jobs = await q.call('EMQ.CLAIM', 'COUNT', count, 'LEASE', 60_000);
  return jobs.map(([id, , token]) => [String(id), Number(token)]);
}

const ids = (claimed) => claimed.map(([id]) => id);

async function ack(q, claimed) {
  for (const [id, token] of claimed) assert.equal(await q.call('EMQ.ACK', id, token), 1, id);
}

/** The fields `names` of each group of the first page of `groups()`, by group. */
async function listed(q, ...names) {
  const { cursor, groups } = await q.groups();
  assert.equal(cursor, '0');
  return Object.fromEntries(groups.map((g) => [g.group, names.map((n) => g[n])]));
}

// Groups: a job's group is its row's; claims take the groups with ready jobs in turn, so a group
// enqueued behind a long one is not starved while each group's jobs keep their order (claimed by
// hand or by a worker of one slot); stats count the named groups the queue knows (with ready or
// active jobs) and every ready job. A group's limits (the queue's `groupConcurrency` and
// `groupRate`, its own `groupLimit`) hold it back at its limit while the others go on; a paused
// group (`pauseGroup`) is skipped until resumed, by `resumeGroup` or its time's end; `groups`
// pages them, the largest backlog first. Order and counts only.
describe('Queue groups', () => {
  test('a job\'s group is its row\'s; a job without one has none', async () => {
    const q = new Queue(client, 'grouped');
    const id = await q.enqueue('x', { group: 'tenant-1' });
    const plain = await q.enqueue('y');
    assert.equal((await q.job(id)).group, 'tenant-1');
    assert.equal((await q.job(plain)).group, undefined);
    // The group stays the job's through its claim.
    const claimed = await q.call('EMQ.CLAIM', 'COUNT', 2, 'LEASE', 60_000);
    assert.deepEqual(claimed.map((j) => j[0]).sort(), [id, plain].sort());
    const row = await q.job(id);
    assert.deepEqual([row.state, row.group], ['active', 'tenant-1']);
  });

  test('a group enqueued behind a long one is claimed in turn; stats count groups and pending', async () => {
    const q = new Queue(client, 'fair');
    const a = await enqueueTo(q, 'a', LONG);
    const b = await enqueueTo(q, 'b', SHORT);
    const stats = await q.stats();
    assert.deepEqual([stats.groups, stats.pending], [2, LONG + SHORT]);
    const order = [];
    for (let n = 0; n < LONG + SHORT; n++) {
      const [[id]] = await q.call('EMQ.CLAIM', 'COUNT', 1, 'LEASE', 60_000);
      order.push(String(id));
    }
    assertFair(order, a, b);
    // Groups with active jobs are still known; once every job is acked, none is.
    const claimed = await q.stats();
    assert.deepEqual([claimed.groups, claimed.pending, claimed.active], [2, 0, LONG + SHORT]);
    await ack(q, order.map((id) => [id, 1]));
    const drained = await q.stats();
    assert.deepEqual([drained.groups, drained.pending, drained.active], [0, 0, 0]);
  });

  test('a worker of one slot runs the groups in turn', async () => {
    const q = new Queue(client, 'fair-worker');
    const a = await enqueueTo(q, 'a', LONG);
    const b = await enqueueTo(q, 'b', SHORT);
    const order = [];
    const worker = new Worker(q, (job) => { order.push(job.id); }, { concurrency: 1, block: 100 });
    try {
      assert.ok(await until(() => order.length === LONG + SHORT, 30_000), `ran ${order.length}`);
    } finally {
      await worker.close();
    }
    assertFair(order, a, b);
  });

  test('a queue that never used groups counts none', async () => {
    const q = new Queue(client, 'ungrouped');
    await q.enqueue('x');
    const stats = await q.stats();
    assert.deepEqual([stats.groups, stats.pending], [0, 1]);
  });

  test('a group at its concurrency limit is held back until a job of it leaves', async () => {
    const q = new Queue(client, 'group-limits');
    assert.equal((await q.limit({ groupConcurrency: 2 }))['group-concurrency'], 2);
    const own = await q.groupLimit('a', { concurrency: 1 });
    assert.deepEqual([own.group, own.concurrency, own['group-concurrency'], own.held], ['a', 1, 2, 0]);
    const a = await enqueueTo(q, 'a', 3);
    const b = await enqueueTo(q, 'b', 3);
    const first = await claim(q);
    // At most each group's limit, each group's jobs in their order.
    assert.deepEqual(ids(first).sort(), [a[0], b[0], b[1]].sort());
    assert.deepEqual(await claim(q), []);
    const report = await q.groupLimit('a');
    assert.deepEqual([report.active, report.ready, report.held], [1, 2, 1]);
    assert.deepEqual(await listed(q, 'ready', 'active', 'concurrency', 'held'), { a: [2, 1, 1, 1], b: [1, 2, 2, 1] });
    // An ack frees one place of that group: one more of a's, none of b's.
    await ack(q, first.filter(([id]) => id === a[0]));
    assert.deepEqual(ids(await claim(q)), [a[1]]);
    assert.deepEqual(await claim(q), []);
    // Without its own limit, a has the default's two places.
    assert.equal((await q.groupLimit('a', { concurrency: null })).concurrency, null);
    assert.deepEqual(ids(await claim(q)), [a[2]]);
    assert.equal((await q.limit({ groupConcurrency: null }))['group-concurrency'], null);
    assert.deepEqual(ids(await claim(q)), [b[2]]);
  });

  test('a paused group is skipped until it is resumed', async () => {
    const q = new Queue(client, 'group-pauses');
    const a = await enqueueTo(q, 'a', 2);
    const b = await enqueueTo(q, 'b', 1);
    assert.equal(await q.pauseGroup('a'), true);
    assert.equal(await q.pauseGroup('a'), false);
    assert.deepEqual(await listed(q, 'paused', 'paused-until'), { a: [1, null], b: [0, null] });
    assert.deepEqual(ids(await claim(q)), b);
    assert.deepEqual(await claim(q), []);
    assert.equal((await q.stats()).pending, 2);
    assert.equal(await q.resumeGroup('a'), true);
    assert.equal(await q.resumeGroup('a'), false);
    assert.deepEqual(ids(await claim(q)), a);
  });

  test('a group paused for a while is run by a worker after', async () => {
    const q = new Queue(client, 'group-paused-for');
    await assert.rejects(q.pauseGroup('a', { ms: -1 }), RangeError);
    const id = await q.enqueue('x', { group: 'a' });
    assert.equal(await q.pauseGroup('a', { ms: 300 }), true);
    // However long it waits, the worker gets the job: the pause ended by itself.
    const ran = [];
    const worker = new Worker(q, (job) => { ran.push(job.id); }, { concurrency: 1, block: 100 });
    try {
      assert.ok(await until(() => ran.length > 0, 30_000), 'the job never ran');
    } finally {
      await worker.close();
    }
    assert.deepEqual(ran, [id]);
  });

  test('the groups are listed largest backlog first over pages', async () => {
    const q = new Queue(client, 'group-listing');
    for (const [group, count] of [['one', 1], ['five', 5], ['three', 3]]) await enqueueTo(q, group, count);
    const pages = [];
    let cursor = '0';
    do {
      const page = await q.groups({ cursor, count: 2 });
      pages.push(page.groups.map((g) => [g.group, g.ready]));
      cursor = page.cursor;
    } while (cursor !== '0');
    assert.deepEqual(pages, [[['five', 5], ['three', 3]], [['one', 1]]]);
    const [first] = (await q.groups()).groups;
    const fields = ['group', 'ready', 'active', 'concurrency', 'paused', 'paused-until', 'held'];
    assert.deepEqual(fields.map((f) => first[f]), ['five', 5, 0, null, 0, null, 0]);
  });

  test('a group at its rate gets no more claims while another goes on', async () => {
    const q = new Queue(client, 'group-rates');
    const limits = await q.limit({ groupRate: 5, groupPer: 60_000 });
    assert.deepEqual([limits['group-rate'], limits['group-rate-per']], [5, 60_000]);
    const own = await q.groupLimit('a', { rate: 2, per: 60_000 });
    assert.deepEqual([own.rate, own['rate-per'], own['group-rate'], own['rate-used']], [2, 60_000, 5, 0]);
    const a = await enqueueTo(q, 'a', 4);
    const b = await enqueueTo(q, 'b', 3);
    assert.deepEqual(ids(await claim(q)).sort(), [...a.slice(0, 2), ...b].sort());
    assert.deepEqual(await claim(q), []);
    assert.equal((await q.groupLimit('a'))['rate-used'], 2);
    assert.deepEqual((await listed(q, 'rate', 'rate-per', 'rate-used')).a, [2, 60_000, 2]);
    // Without its own rate, a has the default's five claims a window: its last two come.
    assert.equal((await q.groupLimit('a', { rate: null })).rate, null);
    assert.deepEqual(ids(await claim(q)), a.slice(2));
    assert.equal((await q.limit({ groupRate: null }))['group-rate'], null);
  });

  test('the group limits and pauses send what they set', async () => {
    const q = new Queue(client, 'group-args');
    await assert.rejects(q.limit({ groupRate: 5 }), /groupPer/);
    await assert.rejects(q.groupLimit('a', { rate: 5 }), /per/);
    const both = await q.limit({ concurrency: 9, groupConcurrency: 3 });
    assert.deepEqual([both.concurrency, both['group-concurrency']], [9, 3]);
    const none = await q.limit({ off: true });
    assert.deepEqual([none.concurrency, none['group-concurrency']], [null, null]);
  });
});
