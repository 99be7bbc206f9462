// On a 3-primary cluster through node-redis's cluster client: a queue on every primary is
// produced, inspected and worked, each call routed by the queue.
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { Queue, Worker, queueSlot } from '../src/index.js';
import { Cluster } from './support/cluster.js';
import { rejectedCalls } from './support/partitioned.js';
import { until } from './support/server.js';

/** @type {Cluster} */
let cluster;
before(async () => {
  cluster = await Cluster.start(3);
});
after(() => cluster?.stop());

test('queues on every primary of a cluster', async () => {
  const client = await cluster.connect();
  // One queue name held by each primary.
  const byNode = new Map();
  for (let n = 0; byNode.size < cluster.nodes.length; n++) {
    const owner = await cluster.owner(`orders-${n}`);
    if (!byNode.has(owner.port)) byNode.set(owner.port, `orders-${n}`);
  }
  const queues = [...byNode.values()].map((name) => new Queue(client, name));
  const done = new Map();
  const workers = [];
  for (const q of queues) {
    const one = await q.enqueue({ queue: q.name });
    const many = await q.enqueueMany(Array.from({ length: 20 }, (_, n) => ({ payload: { n } })));
    assert.equal((await q.job(one)).set, 'pending');
    assert.equal((await q.jobs('pending', { count: 100 })).jobs.length, 21);
    assert.equal(many.length, 20);
    done.set(q.name, []);
    workers.push(new Worker(q, (job) => void done.get(q.name).push(job.id), { concurrency: 4 }));
  }
  assert.ok(await until(async () => {
    for (const q of queues) if ((await q.stats()).pending + (await q.stats()).active > 0) return false;
    return true;
  }, 30_000));
  await Promise.all(workers.map((w) => w.close()));
  for (const [port, name] of byNode) {
    const q = queues.find((x) => x.name === name);
    assert.equal(done.get(name).length, 21, `${name} on ${port}`);
    assert.equal(new Set(done.get(name)).size, 21);
    const node = cluster.nodes.find((n) => n.port === port);
    // The queue's keys live on the primary that owns its slot, and only there.
    assert.equal(await node.cmd('EXISTS', `emq:{${name}}:pending`), 0);
    assert.deepEqual(await node.cmd('EMQ.QUEUES'), ['0', [name]]);
    assert.equal((await q.stats()).active, 0);
  }
  for (const w of workers) assert.deepEqual(w.counts, { acked: 21, failed: 0, retried: 0, lost: 0, cancelled: 0, timedOut: 0 });
});

test('the event stream and limits of a queue on a cluster', async () => {
  const client = await cluster.connect();
  const q = new Queue(client, 'clustered-events');
  await q.enableEvents();
  assert.equal((await q.limit({ concurrency: 2 })).concurrency, 2);
  const id = await q.enqueue('x');
  const seen = [];
  for await (const e of q.events({ from: '0', block: 100 })) {
    seen.push(e.event);
    break;
  }
  assert.deepEqual(seen, ['enqueued']);
  assert.equal((await q.job(id)).payload, 'x');
});

test('a flow across the primaries: ADOPT at enqueue, the hand-overs delivered by the workers sweeps', async () => {
  const client = await cluster.connect();
  // The parent's queue on one primary, a child's queue on each of the two others.
  const names = [];
  const owners = new Set();
  for (let n = 0; names.length < cluster.nodes.length; n++) {
    const owner = await cluster.owner(`flow-${n}`);
    if (!owners.has(owner.port)) {
      owners.add(owner.port);
      names.push(`flow-${n}`);
    }
  }
  const [top, left, right] = names.map((name) => new Queue(client, name));
  assert.notEqual(queueSlot(top.name), queueSlot(left.name));
  const tree = {
    payload: 'root',
    children: [
      { queue: left.name, payload: 'left' },
      { queue: right.name, payload: 'right', onFail: /** @type {const} */ ('ignore') },
      { payload: 'near' },
    ],
  };
  await top.flow(tree);
  const root = await top.job(String(tree.id));
  assert.deepEqual([root.state, root.children, root.adopted], ['waiting', 3, 3], 'two children by EMQ.ADOPT, one in the enqueue');
  // A retry before anything ran: the same jobs, each registered once.
  await top.flow(tree);
  assert.equal((await top.job(String(tree.id))).adopted, 3);
  const delivered = [];
  const ran = [];
  const workers = [
    new Worker(top, async (job) => {
      if (job.payload === 'root') ran.push(await job.children());
      return `${job.payload}!`;
    }),
    new Worker(left, (job) => `${job.payload}!`),
    new Worker(right, (job) => `${job.payload}!`),
  ];
  for (const w of workers) w.on('delivered', (entry) => delivered.push(entry));
  assert.ok(await until(() => ran.length === 1, 30_000), 'the root ran');
  await Promise.all(workers.map((w) => w.close()));
  const children = ran[0];
  assert.deepEqual(
    [...children.values()].map((c) => [c.queue, c.status, c.data]).sort(),
    [[left.name, 'acked', 'left!'], [right.name, 'acked', 'right!'], [top.name, 'acked', 'near!']].sort(),
  );
  // The two children in other slots reached the root through their queues' outboxes.
  assert.deepEqual(delivered.map((d) => [d.queue, d.parentQueue, d.reply]).sort(), [[left.name, top.name, 'counted'], [right.name, top.name, 'counted']].sort());
  for (const q of [left, right]) assert.deepEqual(await q.send(['EMQ.OUTBOX', q.name], true), ['0', []]);
  assert.ok(await until(async () => (await top.job(String(tree.id)))?.state === 'done', 30_000));
  assert.equal((await top.job(String(tree.id))).finished, 3);
  assert.equal(workers[0].counts.acked, 2, 'near and root, once each');
});

test('cancelFlow on a cluster: the unstarted children in other slots go with their parent, a started one runs on', async () => {
  const client = await cluster.connect();
  const [home, second, third] = cluster.nodes;
  const reports = new Queue(client, await queueOn(home, 'cut-reports'));
  const left = await queueOn(second, 'cut-left');
  const right = await queueOn(third, 'cut-right');
  const started = await queueOn(second, 'cut-started');
  // A child in another slot; a child in the parent's own queue (in reach) that is the parent of
  // one in a third slot; and a child in another slot that has started.
  const built = await reports.flow({ payload: 'sum', children: [
    { queue: left, payload: 'a' },
    { payload: 'b', children: [{ queue: right, payload: 'c' }] },
    { queue: started, payload: 'd' },
  ] });
  const [a, b, d] = built.children;
  const [c] = b.children;
  const claimed = await reports.sibling(started).send(['EMQ.CLAIM', started, 'COUNT', '1', 'LEASE', '60000']);
  assert.deepEqual(claimed.map((/** @type {any[]} */ j) => String(j[0])), [d.id]);
  assert.equal(await reports.cancelFlow(built.id), 4, 'the parent, a, b (by the module) and c');
  for (const [queue, id] of [[left, a.id], [reports.name, b.id], [right, c.id]]) {
    assert.equal(await reports.sibling(queue).job(id), null, `${queue} ${id} is gone`);
  }
  assert.equal((await reports.sibling(started).job(d.id)).state, 'active', 'a started child runs on');
});

/** A queue named `<prefix>-<n>` whose slot `node` owns. */
async function queueOn(node, prefix) {
  for (let n = 0; ; n++) if ((await cluster.owner(`${prefix}-${n}`)) === node) return `${prefix}-${n}`;
}

test('a worker whose slot two primaries each send to the other (MOVED past node-redis\'s redirections) waits it out, at its start and as it claims', async () => {
  const client = await cluster.connect();
  const [home, away] = cluster.nodes;
  const name = await queueOn(home, 'bounced');
  const slot = queueSlot(name);
  assert.equal(await home.cmd('CLUSTER', 'COUNTKEYSINSLOT', slot), 0, 'an empty slot can be given away');
  const [homeId, awayId] = [String(await home.cmd('CLUSTER', 'MYID')), String(await away.cmd('CLUSTER', 'MYID'))];
  // Only `home` is told: it sends the slot's commands to `away`, which sends them back.
  const bounce = () => home.cmd('CLUSTER', 'SETSLOT', slot, 'NODE', awayId);
  const settle = () => home.cmd('CLUSTER', 'SETSLOT', slot, 'NODE', homeId);
  // How many `command`s `home` redirected since its stats were reset (node-redis follows each
  // call's redirections 8 times).
  const redirected = (/** @type {string} */ command) => rejectedCalls(home, command);
  const queue = new Queue(client, name);
  const errors = [];
  await home.cmd('CONFIG', 'RESETSTAT');
  await bounce();
  const worker = new Worker(new Queue(client, name, { retries: 0 }), (job) => job.payload, { block: 100 });
  worker.on('error', (e) => errors.push(e));
  try {
    assert.ok(await until(async () => (await redirected('emq.width')) >= 20, 30_000), 'EMQ.WIDTH asked again after each MOVED');
    assert.deepEqual([worker.closing, errors], [false, []], 'the worker goes on');
    await settle();
    await queue.enqueue('first');
    assert.ok(await until(() => worker.counts.acked === 1, 30_000), 'the worker starts once the slot is home');
    // The slot is emptied again, to be given away: its keys are the acked job's.
    for (const key of /** @type {string[]} */ (await home.cmd('CLUSTER', 'GETKEYSINSLOT', slot, 100))) await home.cmd('DEL', key);
    await home.cmd('CONFIG', 'RESETSTAT');
    await bounce();
    assert.ok(await until(async () => (await redirected('emq.claim')) >= 20, 30_000), 'EMQ.CLAIM asked again after each MOVED');
    assert.deepEqual([worker.closing, errors], [false, []], 'the worker goes on');
    await settle();
    await queue.enqueue('second');
    assert.ok(await until(() => worker.counts.acked === 2, 30_000), 'the worker claims again once the slot is home');
  } finally {
    await settle();
    await worker.close();
  }
  assert.deepEqual(errors, []);
});

// Last in the file: it gives the first primary a replica.
test('waitReplicas on a cluster: WAIT goes to the node that took the write, the parent\'s for a hand-over', async () => {
  const client = await cluster.connect();
  const [withReplica, without] = cluster.nodes;
  await cluster.addReplica(withReplica);
  const parents = new Queue(client, await queueOn(withReplica, 'wait-parents'));
  const kids = new Queue(client, await queueOn(without, 'wait-kids'));
  const pid = await parents.enqueue('parent', { children: 2 });
  const kidIds = [await kids.enqueue('a', { parents: [{ queue: parents.name, id: pid }] }), await kids.enqueue('b', { parents: [{ queue: parents.name, id: pid }] })];
  const kidEvents = [];
  const parentEvents = [];
  const ran = [];
  const workers = [
    new Worker(kids, () => 'done', { waitReplicas: 1, waitTimeout: 2000, onEvent: (e) => kidEvents.push(e) }),
    new Worker(parents, async (job) => void ran.push(await job.children()), { waitReplicas: 1, waitTimeout: 10_000, onEvent: (e) => parentEvents.push(e) }),
  ];
  assert.ok(await until(() => ran.length === 1, 60_000), 'the parent ran');
  await Promise.all(workers.map((w) => w.close()));
  // The kids' primary has no replica: their acks went through, unconfirmed.
  assert.deepEqual(kidEvents.filter((e) => e.kind === 'settle').map((e) => [e.outcome, e.replicated]), [['ok', false], ['ok', false]]);
  // Their hand-overs were confirmed by the parent's replica, then removed from the kids' outbox.
  for (const kid of kidIds) {
    const mine = kidEvents.filter((e) => e.id === kid && (e.kind === 'handover' || e.kind === 'delivered'));
    assert.deepEqual(mine.slice(-2).map((e) => [e.kind, e.outcome, e.replicated]), [['handover', 'ok', true], ['delivered', 'ok', null]]);
  }
  assert.deepEqual(await kids.send(['EMQ.OUTBOX', kids.name], true), ['0', []]);
  assert.deepEqual(parentEvents.filter((e) => e.kind === 'settle').map((e) => [e.id, e.outcome, e.replicated]), [[pid, 'ok', true]]);
});

// After the test above: the first primary has a replica.
test('cancelFlow with useReplicas reads the tree on the primaries, never a replica', async () => {
  const client = await cluster.connect({ useReplicas: true });
  const [withReplica, other] = cluster.nodes;
  const [replica] = cluster.replicas;
  const top = new Queue(client, await queueOn(withReplica, 'read-top'));
  const kids = await queueOn(withReplica, 'read-kids');
  const elsewhere = await queueOn(other, 'read-else');
  const built = await top.flow({ payload: 'top', children: [
    { queue: kids, payload: 'k', children: [{ queue: elsewhere, payload: 'e' }] },
    { queue: kids, payload: 'l' },
  ] });
  await replica.cmd('CONFIG', 'RESETSTAT');
  assert.equal(await top.cancelFlow(built.id), 4);
  const stats = String(await replica.cmd('INFO', 'commandstats'));
  assert.doesNotMatch(stats, /cmdstat_emq\.(children|job):/, 'no read of the tree on the replica');
});
