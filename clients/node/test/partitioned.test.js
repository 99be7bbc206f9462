// Partitioned queues through the Node client, on real servers (docs/cluster.md, "A queue
// bigger than one primary"): a Queue that learns the width from the server's refusal and sends
// each job to the partition it routes to, a Worker that drains every partition once and settles
// each job on its own partition (on a cluster, with one blocked claim a primary), the calls on
// one job or every partition, the typed errors, a producer whose width went stale, flows whose
// parents are in partitions (a grouped one by its group), and a worker's start through a
// transient failure. Its schedules, listings and metrics: partitioned_reads.test.js.
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { ErrorReply } from 'redis';
import { EmqError, EmqSpanError, EmqSpannedError, Queue, Retry, Worker, mint, partitionName, queueSlot, route, translate } from '../src/index.js';
import { readWidth } from '../src/span.js';
import { Spread } from '../src/spread.js';
import { Cluster } from './support/cluster.js';
import { Server, freePort, until } from './support/server.js';
import { claimsLogged, commandStats, drain, idsIn, rejectedCalls } from './support/partitioned.js';

/**
 * `total` jobs through a Queue that does not know the width yet: a quarter one by one in five
 * groups, a quarter one by one without, the rest in one `enqueueMany`. Each job's routing key
 * (its group, or else its id), by id.
 * @param {Queue} producer
 * @param {number} total
 */
async function produce(producer, total) {
  /** @type {Map<string, string>} */
  const keys = new Map();
  const single = Math.floor(total / 2);
  for (let i = 0; i < single; i++) {
    const group = i % 2 === 0 ? `tenant-${i % 5}` : undefined;
    const id = await producer.enqueue({ n: i }, { group });
    keys.set(id, group ?? id);
  }
  const ids = await producer.enqueueMany(Array.from({ length: total - single }, (_, i) => ({ payload: { n: single + i } })));
  for (const id of ids) keys.set(id, id);
  assert.equal(keys.size, total);
  return keys;
}

/** Asserts that each job is pending in the partition its key routes to, and that the
 * partitions hold no other job (`EMQ.JOBS` lists the default group's jobs only: each is read). */
async function assertRouted(queue, width, keys) {
  const parts = await queue.partitions();
  assert.deepEqual(parts.map((p) => p.name), parts.map((_, i) => partitionName(queue.name, i, width)));
  await Promise.all(
    [...keys].map(async ([id, key]) => {
      const home = route(width, key);
      const row = await parts[home].job(id);
      assert.equal(row?.set, 'pending', `${id} (key ${key}) is in partition ${home}`);
    }),
  );
  const counts = await Promise.all(parts.map(async (p) => (await p.stats()).pending));
  assert.equal(counts.reduce((n, c) => n + c, 0), keys.size, 'and in no other');
}

/** What `EMQ.WIDTH` answers for `queue`'s own name: `{width, of, index}`. */
async function marks(queue) {
  return readWidth(await queue.send(['EMQ.WIDTH', queue.name], true));
}

/** A fresh id that routes to partition `p` of `width`. @param {number} width @param {number} p */
function idIn(width, p) {
  for (;;) {
    const id = mint();
    if (route(width, id) === p) return id;
  }
}

/** The server's `blocked_clients`. */
async function blocked(server) {
  return Number(/blocked_clients:(\d+)/.exec(String(await server.cmd('INFO', 'clients')))?.[1]);
}

describe('a partitioned queue on one server', () => {
  /** @type {Server} */
  let server;
  let client;
  before(async () => {
    server = await Server.start(['--emq.max-attempts', '2']);
    client = await server.connect();
  });
  after(() => server.stop());

  test('a producer learns the width from EMQSPANNED and sends each job to its partition; a worker drains them all once', async () => {
    assert.equal(await new Queue(client, 'orders').span(4), true);
    const producer = new Queue(client, 'orders');
    assert.equal(producer.knownWidth, undefined);
    const keys = await produce(producer, 200);
    assert.equal(producer.knownWidth, 4, 'learned from the first refusal');
    await assertRouted(new Queue(client, 'orders'), 4, keys);
    assert.equal((await producer.send(['EMQ.STATS', 'orders'], true))[1], 0, 'the queue\'s own name holds none');

    // A tenth fail their first attempt (settled with EMQ.FAIL on their partition); a few wait
    // for a renewal of their lease first (EMQ.RENEW on their partition).
    const slow = new Set([...keys.keys()].filter((_, i) => i % 50 === 7));
    /** @type {Map<string, () => void>} */
    const renewed = new Map();
    const events = [];
    const onEvent = (e) => {
      events.push(e);
      if (e.kind === 'renew' && e.outcome === 'ok') renewed.get(e.id)?.();
    };
    /** @type {Map<string, number>} */
    const numbers = new Map();
    const handler = async (job) => {
      numbers.set(job.id, job.data.n);
      if (job.data.n % 10 === 3 && job.attempt === 1) throw new Retry(0);
      if (slow.has(job.id)) await new Promise((resolve) => renewed.set(job.id, () => resolve(undefined)));
      return job.queue;
    };
    const { worker, runs, queues, errors, done, most } = await drain(new Queue(client, 'orders'), 200, { lease: 1500, onEvent }, handler);
    assert.ok(done, `acked ${worker.counts.acked} of 200`);
    assert.ok(most() <= 8, `at most the concurrency at once, not ${most()}`);
    // Idle: one blocked claim, on one partition, WAKE naming the others.
    assert.ok(await until(async () => (await blocked(server)) === 1));
    for (let i = 0; i < 5; i++) assert.ok((await blocked(server)) <= 1);
    await worker.close();
    assert.deepEqual(errors, []);
    assert.equal(worker.counts.acked, 200);
    assert.equal(worker.counts.retried, 20);
    assert.equal(worker.counts.lost, 0);
    assert.equal(runs.size, 200);
    for (const [id, n] of runs) assert.equal(n, numbers.get(id) % 10 === 3 ? 2 : 1, `${id} ran once, or twice after a failed first attempt`);
    for (const [id, key] of keys) assert.equal(queues.get(id), partitionName('orders', route(4, key), 4), `${id}'s handle names its partition`);
    const settles = events.filter((e) => e.kind === 'settle');
    assert.equal(settles.filter((e) => e.action === 'ack' && e.outcome === 'ok').length, 200);
    assert.ok(settles.every((e) => e.outcome === 'ok' && e.queue === queues.get(e.id)), 'each settle on its job\'s partition');
    for (const id of slow) assert.ok(events.some((e) => e.kind === 'renew' && e.id === id && e.outcome === 'ok' && e.queue === queues.get(id)), `${id} renewed on its partition`);
    const stats = await new Queue(client, 'orders').stats();
    assert.deepEqual([stats.pending, stats.active, stats.scheduled, stats.dead], [0, 0, 0, 0], 'the partitions end empty');
    assert.equal(stats.partitions.length, 4);
  });

  test('a worker takes the partitions in turn: a backlog in one does not hold the claims, its acks\' claims included', async () => {
    const q = new Queue(client, 'turns');
    await q.span(4);
    const ids = Array.from({ length: 400 }, () => mint());
    const deep = ids.filter((id) => route(4, id) === 1).slice(0, 30);
    const shallow = ids.filter((id) => route(4, id) === 2).slice(0, 10);
    assert.deepEqual([deep.length, shallow.length], [30, 10]);
    await q.enqueueMany(deep.map((id) => ({ id, payload: 'deep' })));
    await q.enqueueMany(shallow.map((id) => ({ id, payload: 'shallow' })));
    /** @type {string[]} */
    const order = [];
    const { worker, done } = await drain(new Queue(client, 'turns'), 40, { concurrency: 1 }, (job) => void order.push(job.payload));
    await worker.close();
    assert.ok(done);
    // One at a time, partition by partition: the two alternate while both have jobs.
    assert.equal(order.slice(0, 20).filter((p) => p === 'shallow').length, 10, order.join(' '));
  });

  test('a worker started on an ordinary queue claims its partitions once it is spanned, and the queue again once unspanned', async () => {
    const worker = new Worker(new Queue(client, 'late'), async (job) => job.queue, { block: 100 });
    const errors = [];
    worker.on('error', (e) => errors.push(e));
    assert.ok(await until(async () => (await blocked(server)) === 1), 'the worker waits on the ordinary queue');
    await new Queue(client, 'late').span(3);
    const ids = await new Queue(client, 'late').enqueueMany(Array.from({ length: 30 }, (_, i) => ({ payload: i })));
    /** @type {string[]} */
    const acked = [];
    worker.on('completed', (job) => acked.push(job.id));
    assert.ok(await until(() => acked.length >= 30, 30_000), `acked ${acked.length} of 30`);
    assert.deepEqual([...acked].sort(), [...ids].sort());
    // Unspanned (empty): the worker reads the width again when its blocked claim times out.
    assert.equal(await new Queue(client, 'late').unspan(), true);
    const plain = await new Queue(client, 'late').enqueueMany(Array.from({ length: 5 }, (_, i) => ({ payload: i })));
    assert.ok(await until(() => acked.length >= 35, 30_000), `acked ${acked.length} of 35`);
    await worker.close();
    assert.deepEqual(errors, []);
    assert.deepEqual(acked.slice(30).sort(), [...plain].sort());
  });

  test('a regrouping\'s backoff starts again only once a blocking claim was answered', async () => {
    // After regroupings in a row (a WAKE refused MOVED, say), the first claims of the new loops
    // do not block and go through: they must leave the count, or a WAKE still refused would
    // regroup again and again with no backoff. The loops of a Spread run here by hand, three
    // regroupings counted already.
    const queue = new Queue(client, 'regrouped');
    await queue.span(4);
    await queue.enqueue('one');
    /** @type {number[]} */
    const seen = [];
    const worker = new Worker(queue, () => void seen.push(spread.regroups), { autorun: false, block: 100 });
    worker.claims = client.duplicate();
    await worker.claims.connect();
    const spread = new Spread(worker, 4);
    spread.regroups = 3;
    const running = spread.run();
    try {
      assert.ok(await until(() => seen.length === 1));
      assert.deepEqual(seen, [3], 'the claim that took the job did not block: the count stands');
      assert.ok(await until(() => spread.regroups === 0), 'a blocking claim answered (none came) starts it again');
    } finally {
      await worker.close();
      await running;
    }
    assert.equal(worker.counts.acked, 1);
  });

  test('calls on one job go to its partition by id, a group\'s by its group; the rest add up the partitions', async () => {
    const admin = new Queue(client, 'ops');
    await admin.span(4);
    const producer = new Queue(client, 'ops');
    const ids = await producer.enqueueMany(Array.from({ length: 12 }, (_, i) => ({ payload: i })));
    const grouped = await producer.enqueue('g', { group: 'acme' });

    const reader = new Queue(client, 'ops');
    assert.equal(reader.knownWidth, undefined);
    const row = await reader.job(ids[0]);
    assert.equal(row?.payload, '0', 'found on its partition');
    assert.equal(reader.knownWidth, 4, 'EMQ.WIDTH asked');
    if (route(4, grouped) !== route(4, 'acme')) assert.equal(await reader.job(grouped), null, 'a grouped job is not where its id routes');
    assert.equal((await reader.queueFor('acme').job(grouped))?.group, 'acme', 'but where its group does');
    assert.equal(await new Queue(client, 'ops').cancel(ids[1]), true);
    assert.equal(await reader.job(ids[1]), null);

    const stats = await new Queue(client, 'ops').stats();
    assert.equal(stats.pending, 12);
    const left = [ids[0], ...ids.slice(2), 'acme'];
    assert.deepEqual(stats.partitions.map((p) => p.pending), [0, 1, 2, 3].map((i) => left.filter((key) => route(4, key) === i).length));

    const limits = await admin.limit({ concurrency: 10, groupConcurrency: 2 });
    assert.equal(limits.concurrency, 10);
    assert.deepEqual(limits.partitions.map((p) => p.concurrency), [3, 3, 2, 2]);
    assert.deepEqual(limits.partitions.map((p) => p['group-concurrency']), [2, 2, 2, 2]);
    await assert.rejects(admin.limit({ rate: 3, per: 1000 }), RangeError, 'a limit below the width is refused');
    assert.equal((await admin.limit({ concurrency: null })).concurrency, null);
    assert.equal((await admin.groupLimit('acme', { concurrency: 1 })).concurrency, 1);
    assert.equal((await reader.queueFor('acme').groupLimit('acme')).concurrency, 1, 'on the group\'s partition');

    assert.equal(await admin.pause(), true);
    assert.ok((await admin.stats()).partitions.every((p) => p.paused === 1));
    assert.equal(await admin.resume(), true);

    // A job made dead is requeued by its id; then every partition purged.
    const worker = new Worker(new Queue(client, 'ops'), () => {
      throw new Error('no');
    }, { backoff: 0 });
    assert.ok(await until(async () => (await admin.stats()).dead === 12, 30_000));
    await worker.close();
    assert.equal(await new Queue(client, 'ops').requeue(ids[0]), true);
    assert.equal(await admin.requeueDead(), 11);
    assert.equal((await admin.stats()).pending, 12);
    // A purge leaves a group's jobs, as on an ordinary queue.
    assert.equal(await admin.purge('pending'), 11);
  });

  test('a partitioned queue\'s stats() and limit() answer the fields an ordinary queue\'s do, added up', async () => {
    const plain = new Queue(client, 'fields-plain');
    const wide = new Queue(client, 'fields-wide');
    await wide.span(4);
    const keys = (row) => Object.keys(row).filter((k) => k !== 'partitions').sort();
    const [plainLimits, wideLimits] = [await plain.limit({ concurrency: 8 }), await wide.limit({ concurrency: 8 })];
    assert.deepEqual(keys(wideLimits), keys(plainLimits));
    assert.deepEqual(keys(await wide.limit()), keys(await plain.limit()), 'a report too');
    assert.deepEqual([wideLimits.concurrency, wideLimits.active, wideLimits['rate-used']], [8, 0, 0]);
    assert.deepEqual(wideLimits.partitions?.map(keys), Array(4).fill(keys(plainLimits)));
    assert.deepEqual(keys(await wide.stats()), keys(await plain.stats()));
  });

  test('span, width and unspan', async () => {
    const q = new Queue(client, 'marks');
    assert.equal(await q.width(), 0);
    assert.equal(await q.span(3), true);
    assert.equal(await q.span(3), false, 'the same width again changes nothing');
    assert.equal(await new Queue(client, 'marks').width(), 3);
    const [first] = await q.partitions();
    assert.equal(await first.width(), 3, 'a partition answers its queue\'s width');
    assert.equal(first.knownWidth, 0, 'and takes its jobs itself');
    await assert.rejects(q.span(4), EmqSpanError);
    await assert.rejects(q.span(0), RangeError);
    const elsewhere = Array.from({ length: 100 }, (_, i) => `JOB${String(i).padStart(11, '0')}`).find((id) => route(3, id) !== 0);
    await assert.rejects(first.enqueue('x', { id: elsewhere }), EmqSpannedError, 'a partition sends no job on');
    await first.send(['EMQ.ENQUEUE', first.name, '*', 'held']);
    await assert.rejects(q.unspan(), EmqSpanError, 'a partition holding a job refuses');
    assert.equal(await new Queue(client, 'marks').width(), 3, 'and the queue stays partitioned');
    assert.equal(await first.purge('pending'), 1);
    assert.equal(await q.unspan(), true);
    assert.equal(await q.unspan(), false);
    assert.equal(await new Queue(client, 'marks').width(), 0);
    assert.equal(await first.width(), 0);
    const id = await q.enqueue('ordinary again');
    assert.equal((await q.job(id))?.payload, 'ordinary again');
  });

  test('a span the server would refuse is refused before any partition is marked', async () => {
    const unmarked = { width: 0, of: null, index: null };
    // A queue that holds a job.
    const held = new Queue(client, 'refused-held');
    await held.enqueue('x');
    await assert.rejects(held.span(4), EmqSpanError);
    for (const p of held.partitionQueues(4)) assert.deepEqual(await marks(p), unmarked, `${p.name} is not marked`);
    assert.equal(await held.width(), 0);
    // A queue spanned over another width: the partitions of the new width that are not also
    // partitions of the old stay unmarked.
    const other = new Queue(client, 'refused-other');
    await other.span(3);
    await assert.rejects(other.span(4), EmqSpanError);
    const old = other.partitionQueues(3).map((p) => p.name);
    for (const p of other.partitionQueues(4)) {
      const i = old.indexOf(p.name);
      assert.deepEqual(await marks(p), i >= 0 ? { width: 3, of: 'refused-other', index: i } : unmarked, `${p.name}`);
    }
    // A partition's own name.
    const [part] = await other.partitions();
    await assert.rejects(part.span(2), EmqSpanError);
    for (const p of part.partitionQueues(2)) assert.deepEqual(await marks(p), unmarked, `${p.name} is not marked`);
    // Once drained, the same call marks the partitions, then the queue.
    await held.purge('pending');
    assert.equal(await held.span(4), true);
    for (const [i, p] of held.partitionQueues(4).entries()) assert.deepEqual(await marks(p), { width: 4, of: 'refused-held', index: i });
  });

  test('EMQSPANNED and EMQSPAN are typed errors', async () => {
    const q = new Queue(client, 'typed');
    await q.span(5);
    await assert.rejects(q.send(['EMQ.ENQUEUE', 'typed', '*', 'x']), (e) => {
      assert.ok(e instanceof EmqSpannedError && e instanceof EmqError);
      assert.equal(e.code, 'EMQSPANNED');
      assert.equal(e.width, 5);
      assert.ok(e.cause instanceof ErrorReply);
      return true;
    });
    await assert.rejects(q.send(['EMQ.CLAIM', 'typed']), (e) => e instanceof EmqSpannedError && e.width === 5);
    await assert.rejects(q.send(['EMQ.SPAN', 'typed', '6']), (e) => e instanceof EmqSpanError && e.code === 'EMQSPAN');
    const held = new Queue(client, 'typed-held');
    await held.enqueue('x');
    await assert.rejects(held.span(2), EmqSpanError, 'a queue holding jobs');
    assert.equal(/** @type {any} */ (translate(new ErrorReply('EMQSPANNED 7 the queue is partitioned'))).width, 7);
  });

  test('a producer whose width went stale learns the new one from a refusal', async () => {
    // Width 2 to 4, changed by another Queue: partition 0 keeps its name when its slot is in the
    // first quarter, and refuses a job of the 2-wide route that the 4-wide puts in partition 2.
    const name = Array.from({ length: 200 }, (_, i) => `stale${i}`).find((q) => partitionName(q, 0, 2) === partitionName(q, 0, 4));
    assert.ok(name);
    const producer = new Queue(client, name);
    await new Queue(client, name).span(2);
    await producer.enqueue('first');
    assert.equal(producer.knownWidth, 2);
    await new Queue(client, name).purge('pending');
    const admin = new Queue(client, name);
    await admin.unspan();
    await admin.span(4);
    const id = Array.from({ length: 1000 }, (_, i) => `JOB${String(i).padStart(11, '0')}`).find((k) => route(2, k) === 0 && route(4, k) === 2);
    assert.ok(id);
    assert.equal(await producer.enqueue('routed again', { id }), id);
    assert.equal(producer.knownWidth, 4, 'learned from the partition\'s refusal');
    assert.equal((await admin.partitionQueues(4)[2].job(id))?.payload, 'routed again');

    // Width 4 to 2: this Queue unspans it, another spans it anew; its next job goes to the
    // queue's own name, which refuses it with the new width.
    await admin.purge('pending');
    await producer.unspan();
    assert.equal(producer.knownWidth, 0);
    await new Queue(client, name).span(2);
    const next = await producer.enqueue('after the change');
    assert.equal(producer.knownWidth, 2);
    assert.ok((await idsIn(producer.partitionQueues(2)[route(2, next)])).has(next));
  });

  test('a width changed under a producer: a retired partition refuses with width 0, the queue with the new width; a Queue on a retired partition\'s name raises at once', async () => {
    const name = 'retire';
    const two = [0, 1].map((i) => partitionName(name, i, 2));
    // Ids whose partition of 4 is no partition of 2: retired once the width is 2.
    const ids = Array.from({ length: 400 }, () => mint()).filter((id) => !two.includes(partitionName(name, route(4, id), 4)));
    assert.ok(ids.length >= 2);
    await new Queue(client, name).span(4);
    const producer = new Queue(client, name);
    const batcher = new Queue(client, name);
    await producer.enqueue('first');
    await batcher.enqueueMany([{ payload: 'first' }]);
    assert.deepEqual([producer.knownWidth, batcher.knownWidth], [4, 4]);
    const admin = new Queue(client, name);
    assert.equal(await admin.purge('pending'), 2);
    assert.equal(await admin.unspan(), true, 'each partition retired, then the queue ordinary');
    assert.equal(await admin.span(2), true);

    await server.cmd('CONFIG', 'RESETSTAT');
    assert.equal(await producer.enqueue('routed again', { id: ids[0] }), ids[0]);
    assert.equal(producer.knownWidth, 2);
    assert.deepEqual(await commandStats(server, 'EMQ.ENQUEUE'), { calls: 3, failed: 2 }, 'the retired partition, the queue, then its partition of 2');
    assert.equal((await admin.partitionQueues(2)[route(2, ids[0])].job(ids[0]))?.payload, 'routed again');
    assert.deepEqual(await batcher.enqueueMany([{ id: ids[1], payload: 'batched' }]), [ids[1]]);
    assert.equal(batcher.knownWidth, 2);
    assert.deepEqual(await commandStats(server, 'EMQ.MENQUEUE'), { calls: 3, failed: 2 });
    assert.equal((await admin.partitionQueues(2)[route(2, ids[1])].job(ids[1]))?.payload, 'batched');

    // A Queue named as the retired partition: its refusal (width 0) names itself, and stands.
    const retired = new Queue(client, partitionName(name, route(4, ids[0]), 4));
    assert.deepEqual(await marks(retired), { width: 0, of: name, index: null });
    await server.cmd('CONFIG', 'RESETSTAT');
    await assert.rejects(retired.enqueue('x'), (e) => e instanceof EmqSpannedError && e.width === 0);
    await assert.rejects(retired.enqueueMany([{ payload: 'x' }]), (e) => e instanceof EmqSpannedError && e.width === 0);
    assert.deepEqual(await commandStats(server, 'EMQ.ENQUEUE'), { calls: 1, failed: 1 }, 'sent once');
    assert.deepEqual(await commandStats(server, 'EMQ.MENQUEUE'), { calls: 1, failed: 1 }, 'sent once');
  });

});

describe('a partitioned queue on a cluster', () => {
  /** @type {Cluster} */
  let cluster;
  let client;
  before(async () => {
    cluster = await Cluster.start(3);
    client = await cluster.connect();
  });
  after(() => cluster?.stop());

  test('spanned over 12: every primary holds partitions, a worker drains 300 jobs once with one blocked claim a primary', async () => {
    await new Queue(client, 'spread').span(12);
    const parts = await new Queue(client, 'spread').partitions();
    const owners = await Promise.all(parts.map((p) => cluster.owner(p.name)));
    assert.equal(new Set(owners).size, 3, 'partitions on every primary');
    const producer = new Queue(client, 'spread');
    const keys = await produce(producer, 300);
    assert.equal(producer.knownWidth, 12);
    await assertRouted(new Queue(client, 'spread'), 12, keys);

    const { worker, runs, queues, errors, done, most } = await drain(new Queue(client, 'spread'), 300, { block: 5000 });
    assert.ok(done, `acked ${worker.counts.acked} of 300`);
    assert.ok(most() <= 8, `at most the concurrency at once over the three loops, not ${most()}`);
    assert.equal(runs.size, 300);
    assert.ok([...runs.values()].every((n) => n === 1), 'each job handled once');
    for (const [id, key] of keys) assert.equal(queues.get(id), partitionName('spread', route(12, key), 12));
    // Idle: each primary's loop blocks once (WAKE naming its other partitions), never twice.
    assert.ok(await until(async () => (await Promise.all(cluster.nodes.map(blocked))).every((n) => n === 1), 20_000), 'one blocked claim on each primary');
    for (let i = 0; i < 5; i++) {
      const counts = await Promise.all(cluster.nodes.map(blocked));
      assert.ok(counts.every((n) => n <= 1), `blocked clients ${counts}`);
    }
    await worker.close();
    assert.deepEqual(errors, []);
    const stats = await new Queue(client, 'spread').stats();
    assert.deepEqual([stats.pending, stats.active], [0, 0]);
  });

  test('children in partitions reach their parent in another slot through each partition\'s outbox', async () => {
    const reports = new Queue(client, 'reports');
    const pages = new Queue(client, 'pages');
    await pages.span(6);
    const parent = await reports.enqueue('report', { children: 4 });
    const children = [];
    for (let i = 0; i < 4; i++) children.push(await pages.enqueue({ page: i }, { parents: [{ queue: 'reports', id: parent }] }));
    const homes = children.map((id) => pages.queueFor(id).name);
    /** @type {import('../index.js').Handover[]} */
    const delivered = [];
    const worker = new Worker(new Queue(client, 'pages'), (job) => job.queue, { block: 200 });
    worker.on('delivered', (entry) => delivered.push(entry));
    assert.ok(await until(async () => (await reports.job(parent))?.state === 'pending', 30_000), 'the parent ran its children');
    await worker.close();
    assert.equal(worker.counts.acked, 4);
    assert.deepEqual(
      delivered.map((e) => `${e.queue} ${e.id} ${e.parentQueue} ${e.parentId}`).sort(),
      children.map((id, i) => `${homes[i]} ${id} reports ${parent}`).sort(),
      'each hand-over swept from its child\'s partition',
    );
  });

  test('a flow whose parents are in partitions: each child is adopted by its parent\'s partition, on that primary', async () => {
    await new Queue(client, 'albums').span(6);
    const tree = await new Queue(client, 'albums').flow({
      payload: 'album',
      children: [0, 1, 2, 3].map((t) => ({ queue: 'tracks', payload: `track${t}` })),
    });
    const batch = await new Queue(client, 'tracks').batch([{ payload: 'b0' }, { payload: 'b1' }], { onComplete: { queue: 'albums', payload: 'done' } });
    const albums = new Queue(client, 'albums');
    for (const id of [tree.id, batch.id]) assert.equal((await albums.job(id))?.adopted, id === tree.id ? 4 : 2);
    /** @type {Map<string, string[]>} */
    const ran = new Map();
    const parents = new Worker(new Queue(client, 'albums'), async (job) => void ran.set(job.payload, [...(await job.children()).keys()]), { block: 200 });
    const children = new Worker(new Queue(client, 'tracks'), (job) => job.payload, { block: 200 });
    assert.ok(await until(() => ran.size === 2, 30_000), 'both parents ran');
    await Promise.all([parents.close(), children.close()]);
    assert.deepEqual(ran.get('album')?.sort(), (tree.children ?? []).map((c) => `tracks:${c.id}`).sort());
    assert.deepEqual(ran.get('done')?.sort(), batch.ids.map((id) => `tracks:${id}`).sort());
  });

  test('a child whose Queue has not learned the width, or holds a stale one, is adopted under the partition it goes to', async () => {
    const name = 'kids';
    const parents = new Queue(client, 'adopting');
    assert.notEqual(queueSlot('adopting'), queueSlot(name), 'the parent is in another slot: EMQ.ADOPT first');
    const home = (id, width) => `${partitionName(name, route(width, id), width)}:${id}`;
    await new Queue(client, name).span(6);
    // Each child through a Queue that does not know the width: each parent counts it once,
    // under its partition (not under the queue's own name, where it never was).
    const parent = await parents.enqueue('report', { children: 2 });
    const ref = [{ queue: 'adopting', id: parent }];
    const a = await new Queue(client, name).enqueue('a', { parents: ref });
    const b = await new Queue(client, name).enqueue('b', { parents: ref });
    assert.deepEqual([...(await parents.children(parent)).keys()].sort(), [home(a, 6), home(b, 6)].sort());

    // A width changed under a producer: the retired partition's refusal (width 0) has it read
    // the width, so the queue's own name is not adopted on the way to the partition of 2.
    const stale = new Queue(client, name);
    assert.equal(await stale.width(), 6);
    await new Queue(client, name).purge('pending');
    await new Queue(client, name).unspan();
    await new Queue(client, name).span(2);
    const two = [0, 1].map((i) => partitionName(name, i, 2));
    const c = Array.from({ length: 400 }, () => mint()).find((id) => !two.includes(partitionName(name, route(6, id), 6)));
    assert.ok(c);
    // Room for the child under the retired partition too, adopted before its refusal (change
    // a width with the queue's producers stopped: docs/cluster.md).
    const later = await parents.enqueue('report', { children: 2 });
    assert.equal(await stale.enqueue('c', { id: c, parents: [{ queue: 'adopting', id: later }] }), c);
    assert.equal(stale.knownWidth, 2);
    const adopted = await parents.children(later);
    assert.ok(adopted.has(home(c, 2)), 'adopted under its partition of 2');
    assert.ok(!adopted.has(`${name}:${c}`), 'never under the queue\'s own name');
  });

  test('a flow\'s grouped parent in a partitioned queue goes to its group\'s partition, its children find it there, and the flow completes', async () => {
    await new Queue(client, 'invoices').span(6);
    await new Queue(client, 'lines').span(4);
    const group = 'acme';
    // An id whose own partition is not its group's: found by the group only.
    const id = Array.from({ length: 100 }, () => mint()).find((k) => route(6, k) !== route(6, group));
    assert.ok(id);
    const q = new Queue(client, 'invoices');
    // A node with a group the server would refuse is refused before anything is sent.
    await assert.rejects(q.flow({ payload: 'bad', children: [{ queue: 'lines', payload: 'l', group: 'a{b}' }] }), TypeError);
    assert.equal((await q.stats()).waiting, 0, 'no parent left waiting');

    const tree = await q.flow({
      id,
      group,
      payload: 'invoice',
      children: [0, 1, 2, 3].map((n) => ({ queue: 'lines', payload: `line${n}`, group: n % 2 === 0 ? 'line-group' : undefined })),
    });
    const parts = q.partitionQueues(6);
    const row = await parts[route(6, group)].job(id);
    assert.deepEqual([row?.set, row?.group, row?.children, row?.adopted], ['waiting', group, 4, 4], 'in its group\'s partition, its children adopted there');
    assert.equal(await parts[route(6, id)].job(id), null, 'not where its id routes');
    const lines = new Queue(client, 'lines');
    for (const [n, child] of (tree.children ?? []).entries()) {
      const home = lines.partitionQueues(4)[route(4, n % 2 === 0 ? 'line-group' : child.id)];
      const childRow = await home.job(child.id);
      assert.equal(childRow?.set, 'pending', `line${n} in its partition`);
      assert.ok(String(childRow?.parents).startsWith(`${parts[route(6, group)].name} ${id}`), 'naming its parent\'s partition');
    }

    /** @type {Array<{queue: string, children: string[]}>} */
    const ran = [];
    const parents = new Worker(new Queue(client, 'invoices'), async (job) => {
      const children = await job.children();
      ran.push({ queue: job.queue, children: [...children.values()].map((c) => `${c.status} ${c.id}`) });
      return 'paid';
    }, { block: 200 });
    const children = new Worker(new Queue(client, 'lines'), (job) => job.payload, { block: 200 });
    assert.ok(await until(() => parents.counts.acked === 1, 30_000), 'the parent ran once its children finished');
    await Promise.all([parents.close(), children.close()]);
    assert.equal(children.counts.acked, 4);
    assert.deepEqual(ran.map((r) => r.queue), [parts[route(6, group)].name], 'claimed from its group\'s partition');
    assert.deepEqual(ran[0].children.sort(), (tree.children ?? []).map((c) => `acked ${c.id}`).sort());
    const stats = await new Queue(client, 'invoices').stats();
    assert.deepEqual([stats.pending, stats.active, stats.waiting, stats.dead], [0, 0, 0, 0], 'the flow completed');
  });

  test('each claim of a loop among several holds at most its primary\'s share of the concurrency', async () => {
    // A claim to a primary that stops answering keeps the slots it holds (node-redis has no
    // command timeout): one primary's claim must leave the others room.
    await new Queue(client, 'shared').span(6);
    const parts = await new Queue(client, 'shared').partitions();
    const primaries = new Set(await Promise.all(parts.map(async (p) => (await cluster.owner(p.name)).port))).size;
    assert.ok(primaries > 1);
    for (const n of cluster.nodes) await n.cmd('CONFIG', 'SET', 'slowlog-log-slower-than', '0', 'slowlog-max-len', '10000');
    try {
      for (const n of cluster.nodes) await n.cmd('SLOWLOG', 'RESET');
      await new Queue(client, 'shared').enqueueMany(Array.from({ length: 60 }, (_, i) => ({ payload: i })));
      const { worker, done } = await drain(new Queue(client, 'shared'), 60, { concurrency: 6 });
      await worker.close();
      assert.ok(done);
      const claims = (await Promise.all(cluster.nodes.map(claimsLogged))).flat();
      assert.ok(claims.some((c) => !c.blocking), 'claims that did not block');
      const share = Math.floor(6 / primaries);
      assert.deepEqual(claims.filter((c) => c.count > share), [], `each at most ${share}`);
    } finally {
      for (const n of cluster.nodes) await n.cmd('CONFIG', 'SET', 'slowlog-log-slower-than', '10000');
    }
  });

  // Last: the slot map is no longer the one Cluster.owner knows.
  test('a partition moved to another primary while the worker waits: its loops regroup and claim it there', async () => {
    await new Queue(client, 'moving').span(6);
    const parts = await new Queue(client, 'moving').partitions();
    const [from, to] = [await cluster.owner(parts[0].name), await cluster.owner(parts[2].name)];
    assert.notEqual(from, to);
    const { worker, runs, queues, errors, done } = await drain(new Queue(client, 'moving'), 0, { block: 2000 });
    assert.ok(done);
    const idle = async () => (await Promise.all(cluster.nodes.map(blocked))).every((n) => n === 1);
    assert.ok(await until(idle, 20_000), 'one blocked claim on each primary');
    const slot = Number(await from.cmd('CLUSTER', 'KEYSLOT', `emq:{${parts[0].name}}:pending`));
    assert.ok((await cluster.moveSlot(slot, from, to)) > 0);
    const ids = await new Queue(client, 'moving').enqueueMany(Array.from({ length: 40 }, (_, i) => ({ payload: i })));
    assert.ok(ids.some((id) => route(6, id) === 0), 'some job in the partition moved');
    assert.ok(await until(() => worker.counts.acked >= 40, 30_000), `acked ${worker.counts.acked} of 40`);
    assert.ok(await until(idle, 20_000), 'one blocked claim on each primary again');
    for (let i = 0; i < 5; i++) {
      const counts = await Promise.all(cluster.nodes.map(blocked));
      assert.ok(counts.every((n) => n <= 1), `blocked clients ${counts}`);
    }
    await worker.close();
    assert.deepEqual(errors, []);
    assert.equal(runs.size, 40);
    assert.ok([...runs.values()].every((n) => n === 1));
    assert.ok(ids.every((id) => queues.get(id) === parts[route(6, id)].name));
  });

  test('a paused primary holds up no other primary\'s settles: each partition is settled apart', async () => {
    // Its primary cut off, the others serve their own slots still.
    for (const n of cluster.nodes) await n.cmd('CONFIG', 'SET', 'cluster-require-full-coverage', 'no');
    // A queue whose own slot (its width is read there) is not on the primary to be paused, a
    // partition on that primary and one elsewhere.
    let name = '';
    let at = -1;
    let away = -1;
    for (let n = 0; at < 0 || away < 0; n++) {
      name = `held-${n}`;
      const home = await cluster.owner(name);
      const owners = await Promise.all([0, 1, 2, 3].map((i) => cluster.owner(partitionName(name, i, 4))));
      at = owners.findIndex((o) => o !== home);
      away = owners.findIndex((o) => o === home);
    }
    const q = new Queue(client, name);
    await q.span(4);
    const [paused, elsewhere] = [idIn(4, at), idIn(4, away)];
    await q.enqueue('x', { id: paused });
    /** @type {(value: string) => void} */
    let finish = () => {};
    const held = new Promise((resolve) => (finish = resolve));
    const events = [];
    const worker = new Worker(new Queue(client, name), (job) => (job.id === paused ? held : 'ok'), { onEvent: (e) => events.push(e) });
    const seen = (/** @type {string} */ kind, /** @type {string} */ id) => events.some((e) => e.kind === kind && e.id === id);
    const node = await cluster.owner(partitionName(name, at, 4));
    try {
      assert.ok(await until(() => seen('handler_start', paused), 30_000));
      node.process.kill('SIGSTOP');
      finish('done');
      assert.ok(await until(() => seen('handler_end', paused), 30_000));
      await q.enqueue('y', { id: elsewhere });
      assert.ok(await until(() => seen('settle', elsewhere), 30_000), 'the other primary\'s job was settled');
      assert.ok(!seen('settle', paused), 'the paused primary\'s ack is still in flight');
    } finally {
      node.process.kill('SIGCONT');
    }
    assert.ok(await until(() => seen('settle', paused), 30_000), 'settled once its primary resumed');
    await worker.close();
    assert.equal(worker.counts.acked, 2);
  });

  test('the queue\'s own primary paused: the loops of the others claim on (its width, read after an idle claim, is not waited for)', async () => {
    for (const n of cluster.nodes) await n.cmd('CONFIG', 'SET', 'cluster-require-full-coverage', 'no');
    // A queue with a partition on another primary than its own slot's; the owners found before
    // the pause (the map is read on the first node).
    let name = '';
    let home;
    let away = -1;
    for (let n = 0; away < 0; n++) {
      name = `own-${n}`;
      home = await cluster.owner(name);
      const owners = await Promise.all([0, 1, 2, 3].map((i) => cluster.owner(partitionName(name, i, 4))));
      away = owners.findIndex((o) => o !== home);
    }
    const other = await cluster.owner(partitionName(name, away, 4));
    const q = new Queue(client, name);
    await q.span(4);
    const id = idIn(4, away);
    const worker = new Worker(new Queue(client, name), () => 'ok', { block: 100 });
    const claims = async () => (await commandStats(other, 'EMQ.CLAIM')).calls;
    try {
      await other.cmd('CONFIG', 'RESETSTAT');
      assert.ok(await until(async () => (await claims()) >= 3, 30_000), 'idle, the loops block and time out');
      home.process.kill('SIGSTOP');
      try {
        await other.cmd('CONFIG', 'RESETSTAT');
        assert.ok(await until(async () => (await claims()) >= 5, 30_000), 'the other primary\'s loop claims on');
        await q.enqueue('x', { id });
        assert.ok(await until(() => worker.counts.acked === 1, 30_000), 'its job acked while the queue\'s own primary is paused');
      } finally {
        home.process.kill('SIGCONT');
      }
    } finally {
      await worker.close();
    }
  });
});

describe('a worker\'s start through a transient failure', () => {
  /**
   * Runs a Worker on `queue` (a Queue on `client` that retries nothing itself) while `refused`
   * holds, until the server has refused `command` three times; `recover`s, enqueues a job and
   * waits for its ack. The worker's errors.
   */
  async function startThrough(client, server, command, recover) {
    const errors = [];
    const worker = new Worker(new Queue(client, 'starting', { retries: 0 }), (job) => job.payload, { block: 100 });
    worker.on('error', (e) => errors.push(e));
    try {
      assert.ok(await until(async () => (await rejectedCalls(server, command)) >= 3), `${command} asked again, after each refusal`);
      await recover();
      await new Queue(client, 'starting').enqueue('after');
      assert.ok(await until(() => worker.counts.acked === 1, 30_000), 'the worker claims once the server answers');
    } finally {
      await worker.close();
    }
    return errors;
  }

  test('EMQ.VERSION and EMQ.WIDTH refused MASTERDOWN (a replica cut off from its primary)', async () => {
    const server = await Server.start();
    try {
      const client = await server.connect();
      await new Queue(client, 'starting').span(2);
      await server.cmd('CONFIG', 'SET', 'replica-serve-stale-data', 'no');
      await server.cmd('REPLICAOF', '127.0.0.1', await freePort());
      await server.cmd('CONFIG', 'RESETSTAT');
      const errors = await startThrough(client, server, 'EMQ.VERSION', () => server.cmd('REPLICAOF', 'NO', 'ONE'));
      assert.deepEqual(errors, []);
    } finally {
      await server.stop();
    }
  });

  test('EMQ.WIDTH refused CLUSTERDOWN (a slot of the cluster unserved), EMQ.VERSION answered', async () => {
    const cluster = await Cluster.start(1);
    try {
      const client = await cluster.connect();
      const [node] = cluster.nodes;
      const other = (queueSlot('starting') + 1) % 16384;
      await node.cmd('CLUSTER', 'DELSLOTS', other);
      assert.ok(await until(async () => String(await node.cmd('CLUSTER', 'INFO')).includes('cluster_state:fail')));
      await node.cmd('CONFIG', 'RESETSTAT');
      const errors = await startThrough(client, node, 'EMQ.WIDTH', async () => {
        await node.cmd('CLUSTER', 'ADDSLOTS', other);
        assert.ok(await until(async () => String(await node.cmd('CLUSTER', 'INFO')).includes('cluster_state:ok')));
      });
      assert.deepEqual(errors, []);
    } finally {
      await cluster.stop();
    }
  });
});
