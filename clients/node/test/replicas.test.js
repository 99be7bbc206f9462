// The worker's `waitReplicas` against a real primary and replica, and against a primary with
// no replica: each settle reports what `WAIT` confirmed, and an outbox entry is removed only
// once the parent's replicas confirmed its hand-over (here the kids' user may not write the
// parent's keys, so every hand-over waits in the kids' outbox for a sweep).
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { createClient } from 'redis';
import { EmqNotReplicatedError, Queue, Worker } from '../src/index.js';
import { sendWaited } from '../src/replicas.js';
import { Server, until } from './support/server.js';

/** @type {Server} */
let primary;
/** @type {Server} */
let replica;
/** @type {Server} */
let lone;
/** @type {Worker[]} */
const workers = [];
before(async () => {
  primary = await Server.start();
  replica = await Server.start(['--replicaof', '127.0.0.1', String(primary.port)]);
  lone = await Server.start();
  const linked = await until(async () => String(await primary.cmd('INFO', 'replication')).includes('connected_slaves:1'), 30_000);
  assert.ok(linked, 'the replica attached');
});
after(async () => {
  await Promise.all(workers.map((w) => w.close()));
  for (const s of [replica, primary, lone]) await s?.stop();
});

function work(queue, handler, options = {}) {
  const w = new Worker(queue, handler, { block: 200, ...options });
  w.on('error', () => {});
  workers.push(w);
  return w;
}

/**
 * A parent on `server` waiting for 2 kids whose hand-overs sit in the kids' outbox: acked by a
 * user that may write only the kids' queue, with `options`; the parent's id, the kids' ids and
 * the kids worker's events.
 */
async function parked(server, client, options) {
  await server.cmd('ACL', 'SETUSER', 'kid', 'on', '>pw', '+@all', '~emq:{kids}:*');
  const kidClient = createClient({ url: `redis://kid:pw@127.0.0.1:${server.port}` });
  await kidClient.connect();
  const pid = await new Queue(client, 'parents').enqueue('parent', { children: 2 });
  const kids = [];
  for (let n = 0; n < 2; n++) kids.push(await new Queue(client, 'kids').enqueue({ n }, { parents: [{ queue: 'parents', id: pid }] }));
  const events = [];
  const w = work(new Queue(kidClient, 'kids'), () => 'done', { ...options, onEvent: (e) => events.push(e) });
  assert.ok(await until(() => w.counts.acked === 2, 30_000), 'the kids acked');
  await w.close();
  await kidClient.disconnect();
  const outbox = await server.cmd('EMQ.OUTBOX', 'kids');
  assert.deepEqual(outbox[1].map((/** @type {any[]} */ e) => e[0]).sort(), [...kids].sort(), 'both hand-overs wait in the outbox');
  return { pid, kids, events };
}

/** The sweep's events of `events`. */
function steps(events) {
  return events.filter((e) => e.kind === 'handover' || e.kind === 'delivered');
}

test('with a replica attached: settles and hand-overs report replicated, and the entries are delivered', async () => {
  const client = await primary.connect();
  const { pid, kids, events: kidEvents } = await parked(primary, client, { waitReplicas: 1, waitTimeout: 10_000 });
  const settles = kidEvents.filter((e) => e.kind === 'settle');
  assert.deepEqual(settles.map((e) => [e.action, e.outcome, e.replicated]), [['ack', 'ok', true], ['ack', 'ok', true]]);
  const events = [];
  const ran = [];
  work(new Queue(client, 'kids'), () => undefined, { waitReplicas: 1, waitTimeout: 10_000, onEvent: (e) => events.push(e) });
  work(new Queue(client, 'parents'), async (job) => void ran.push(await job.children()), { waitReplicas: 1, waitTimeout: 10_000 });
  assert.ok(await until(() => ran.length === 1, 30_000), 'the parent ran');
  // The parent may run between a kid's hand-over and the removal of its entry: wait for both.
  const both = () => kids.every((kid) => steps(events).filter((e) => e.id === kid).length >= 2);
  assert.ok(await until(both, 30_000), 'each entry handed over and removed');
  for (const kid of kids) {
    assert.deepEqual(
      steps(events).filter((e) => e.id === kid).map((e) => [e.kind, e.outcome, e.replicated]),
      [['handover', 'ok', true], ['delivered', 'ok', null]],
    );
  }
  assert.deepEqual(await primary.cmd('EMQ.OUTBOX', 'kids'), ['0', []]);
  // The replica has both counts: the hand-overs reached it before their entries went.
  const seen = await until(async () => String(await replica.cmd('HGET', `emq:{parents}:job:${pid}`, 'finished')) === '2', 30_000);
  assert.ok(seen, "the replica's row of the parent counts both kids");
});

test('with the replica asked for absent: the hand-over is not delivered, its entry stays', async () => {
  const client = await lone.connect();
  const { pid, kids, events: kidEvents } = await parked(lone, client, { waitReplicas: 1, waitTimeout: 50 });
  assert.deepEqual(kidEvents.filter((e) => e.kind === 'settle').map((e) => [e.outcome, e.replicated]), [['ok', false], ['ok', false]], 'acked, not confirmed');
  const events = [];
  const sweeper = work(new Queue(client, 'kids'), () => undefined, { waitReplicas: 1, waitTimeout: 50, onEvent: (e) => events.push(e) });
  // Two sweeps of each entry: the first left it, the second found it again.
  const twice = () => kids.every((kid) => steps(events).filter((e) => e.id === kid).length >= 2);
  assert.ok(await until(twice, 30_000), 'each entry handed over twice');
  await sweeper.close();
  for (const e of steps(events)) assert.deepEqual([e.kind, e.outcome, e.replicated], ['handover', 'ok', false], 'never DELIVERED');
  const outbox = await lone.cmd('EMQ.OUTBOX', 'kids');
  assert.deepEqual(outbox[1].map((/** @type {any[]} */ e) => e[0]).sort(), [...kids].sort(), 'the entries stay for the next sweep');
  // The parent counted each kid once (the second hand-over was a duplicate) and runs; only the
  // entries wait for replicas that are not there.
  const row = await new Queue(client, 'parents').job(pid);
  assert.deepEqual([row.finished, row.state], [2, 'pending']);
});

test("a Queue's waitReplicas: enqueues the replica confirmed answer their ids", async () => {
  const client = await primary.connect();
  const queue = new Queue(client, 'produced', { waitReplicas: 1, waitTimeout: 10_000 });
  const one = await queue.enqueue('one');
  const many = await queue.enqueueMany(['a', 'b', 'c'].map((payload) => ({ payload })), { chunk: 2 });
  // Confirmed means there already: the replica holds every row with no wait of ours.
  for (const id of [one, ...many]) assert.equal(await replica.cmd('HGET', `emq:{produced}:job:${id}`, 'state'), 'pending', id);
  // A worker on it waits as its queue does, unless told otherwise.
  assert.deepEqual(new Worker(queue, () => undefined, { autorun: false }).wait, { replicas: 1, timeout: 10_000 });
  assert.equal(new Worker(queue, () => undefined, { autorun: false, waitReplicas: 0 }).wait, null);
});

test("a Queue's waitReplicas with no replica: EmqNotReplicatedError, the jobs written all the same", async () => {
  const client = await lone.connect();
  const queue = new Queue(client, 'unconfirmed', { waitReplicas: 1, waitTimeout: 50 });
  const one = await queue.enqueue('one').then(
    () => assert.fail('an unconfirmed enqueue answered'),
    (/** @type {any} */ e) => {
      assert.ok(e instanceof EmqNotReplicatedError, String(e));
      assert.deepEqual([e.code, e.replicas, e.wanted, e.ids.length], ['', 0, 1, 1]);
      return e.ids[0];
    },
  );
  assert.equal((await queue.job(one))?.state, 'pending', 'taken by the primary');
  const payloads = ['x', 'y', 'z'];
  const e = await queue.enqueueMany(payloads.map((payload) => ({ payload })), { chunk: 2 }).catch((/** @type {unknown} */ e) => e);
  assert.ok(e instanceof EmqNotReplicatedError, String(e));
  assert.equal(e.ids.length, 3, 'both chunks unconfirmed');
  assert.deepEqual(e.enqueued, e.ids, 'every job enqueued, in order');
  assert.deepEqual(await Promise.all(e.enqueued.map(async (id) => (await queue.job(id))?.payload)), payloads);
  // A sibling (a flow's other queue) waits alike.
  await assert.rejects(queue.sibling('other').enqueue('two'), EmqNotReplicatedError);
});

test('a WAIT pending on a lone primary holds up no other command of the client', async () => {
  const client = await lone.connect();
  try {
    // A write no replica will confirm: WAIT blocks its connection for its whole timeout.
    const waited = sendWaited(client, 'lonely', [['SET', 'lonely-key', 'x']], { replicas: 1, timeout: 5000 });
    assert.ok(await until(async () => /blocked_clients:1/.test(String(await lone.cmd('INFO', 'clients'))), 5000), 'the WAIT blocks');
    assert.equal(await client.sendCommand(['PING']), 'PONG');
    // The PING was answered while the WAIT still blocks (on a shared connection it would have
    // waited behind it): the client's other commands go on.
    assert.match(String(await lone.cmd('INFO', 'clients')), /blocked_clients:1/, 'answered before the WAIT returned');
    const { replies, confirmed } = await waited;
    assert.deepEqual([replies[0].value, confirmed], ['OK', 0]);
  } finally {
    await client.disconnect();
  }
});

/** What node-redis throws for a connection lost under a command (a transient failure). */
class SocketClosedUnexpectedlyError extends Error {}

test('a waited settle whose connection broke is sent again, not dropped', async () => {
  const client = await primary.connect();
  // The client as it is, but its first waited write (on a connection of its own) is lost.
  let isolated = 0;
  const flaky = new Proxy(client, {
    get(target, name) {
      if (name === 'executeIsolated') {
        return (/** @type {any} */ fn) => (++isolated === 1 ? Promise.reject(new SocketClosedUnexpectedlyError('lost')) : target.executeIsolated(fn));
      }
      const value = Reflect.get(target, name);
      return typeof value === 'function' ? value.bind(target) : value;
    },
  });
  const id = await new Queue(client, 'flaky').enqueue('job');
  const events = [];
  const w = work(new Queue(flaky, 'flaky'), () => 'done', { waitReplicas: 1, waitTimeout: 10_000, onEvent: (e) => events.push(e) });
  assert.ok(await until(() => w.counts.acked === 1, 30_000), 'the job acked');
  await w.close();
  assert.deepEqual(events.filter((e) => e.kind === 'settle').map((e) => [e.id, e.action, e.outcome, e.replicated]), [[id, 'ack', 'ok', true]]);
  assert.equal(isolated, 2, 'the lost one, then the one that went through');
  assert.equal((await new Queue(client, 'flaky').job(id))?.state, 'done');
});
