// Flows against a real server (flows-protocol.md): a parent waits for its children and reads
// their outcomes, ON-FAIL FAIL and IGNORE, the batch's callback, a chain's order, a retried
// flow counted once, the EMQPARENT refusals, the checks made before anything is sent, and the
// outbox a worker sweeps (here a parent the acking user may not write) with its events, and a
// cancelled parent's tree. One attempt a job, so a handler that throws buries its job at once.
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { createClient } from 'redis';
import { CHILDREN_PAGE, EmqCancelIncomplete, EmqError, EmqParentError, Queue, Worker, partitionName, route } from '../src/index.js';
import { Server, until } from './support/server.js';

/** @type {Server} */
let server;
let client;
/** @type {Worker[]} */
let workers = [];
before(async () => {
  server = await Server.start(['--emq.max-attempts', '1']);
  client = await server.connect();
});
after(async () => {
  await Promise.all(workers.map((w) => w.close()));
  await server.stop();
});

/** A worker the suite closes at its end; errors kept, not printed. */
function work(queue, handler, options = {}) {
  const w = new Worker(queue, handler, { block: 200, ...options });
  w.errors = [];
  w.on('error', (e) => w.errors.push(e));
  workers.push(w);
  return w;
}

/** Waits (30 s at most) for `f()`, failing the test with `what` if it never holds. */
async function waitFor(f, what) {
  assert.ok(await until(f, 30_000), `timed out waiting for ${what}`);
}

/** A connected client of `user`, who may touch only `queue`'s keys. */
async function scopedTo(user, queue) {
  await server.cmd('ACL', 'SETUSER', user, 'on', '>pw', '+@all', `~emq:{${queue}}:*`);
  const scoped = createClient({ url: `redis://${user}:pw@127.0.0.1:${server.port}` });
  await scoped.connect();
  return scoped;
}

/** How many children of each status a `children()` map holds. */
function tally(children) {
  const counts = {};
  for (const { status } of children.values()) counts[status] = (counts[status] ?? 0) + 1;
  return counts;
}

describe('flows', () => {
  test('a parent waits until its children are acked, then runs and sees their results', async () => {
    const parents = new Queue(client, 'assemble');
    const parts = new Queue(client, 'parts');
    const pid = await parents.enqueue({ build: 'bike' }, { children: 2 });
    assert.equal((await parents.job(pid)).state, 'waiting');
    assert.equal((await parents.stats()).waiting, 1);
    assert.deepEqual((await parents.jobs('waiting')).jobs.map((j) => j.id), [pid]);
    const a = await parts.enqueue({ part: 'wheel' }, { parents: [{ queue: 'assemble', id: pid }] });
    const b = await parts.enqueue({ part: 'frame' }, { parents: [{ queue: 'assemble', id: pid, onFail: 'fail' }] });
    assert.equal((await parents.job(pid)).adopted, 2);
    const order = [];
    const ran = [];
    // The parent's worker runs from the start: the parent is not claimable while it waits.
    work(parents, async (job) => {
      order.push(job.id);
      ran.push(await job.children());
      return 'built';
    });
    const partsWorker = work(parts, (job) => {
      order.push(job.id);
      return { made: job.data.part };
    });
    await waitFor(() => ran.length === 1, 'the parent to run');
    assert.deepEqual(order.slice(0, 2).sort(), [a, b].sort());
    assert.equal(order[2], pid, 'the parent ran after both children');
    assert.equal(partsWorker.counts.acked, 2);
    const children = ran[0];
    assert.equal(children.size, 2);
    assert.deepEqual(children.get(`parts:${a}`), { queue: 'parts', id: a, status: 'acked', data: '{"made":"wheel"}' });
    assert.deepEqual(children.get(`parts:${b}`), { queue: 'parts', id: b, status: 'acked', data: '{"made":"frame"}' });
    await waitFor(async () => (await parents.stats()).waiting === 0 && (await parents.job(pid)).state === 'done', 'the parent done');
  });

  test('ON-FAIL FAIL: a dead child kills its parent, naming the child in the error', async () => {
    const parents = new Queue(client, 'fail-parent');
    const kids = new Queue(client, 'fail-kids');
    const pid = await parents.enqueue('parent', { children: 2 });
    const good = await kids.enqueue('good', { parents: [{ queue: 'fail-parent', id: pid }] });
    const bad = await kids.enqueue('bad', { parents: [{ queue: 'fail-parent', id: pid, onFail: 'fail' }] });
    let parentRuns = 0;
    work(parents, () => void parentRuns++);
    work(kids, (job) => {
      if (job.payload === 'bad') throw new Error('the bad child broke');
      return 'fine';
    });
    await waitFor(async () => (await parents.job(pid))?.state === 'dead', 'the parent dead');
    const row = await parents.job(pid);
    assert.match(String(row.error), new RegExp(`^child fail-kids ${bad} dead: `));
    assert.match(String(row.error), /the bad child broke/);
    assert.equal(row.set, 'dead');
    assert.equal((await parents.stats()).waiting, 0);
    assert.equal(parentRuns, 0, 'a dead parent never runs');
    const children = await parents.children(pid);
    assert.equal(children.get(`fail-kids:${bad}`)?.status, 'dead');
    // The other child runs either way; its parent is gone by then, or dies after it counted.
    await waitFor(async () => (await kids.job(good))?.state === 'done', 'the good child acked');
  });

  test('ON-FAIL IGNORE: a dead child just counts, and the parent sees it dead', async () => {
    const parents = new Queue(client, 'ignore-parent');
    const kids = new Queue(client, 'ignore-kids');
    const pid = await parents.enqueue('parent', { children: 2 });
    const good = await kids.enqueue('good', { parents: [{ queue: 'ignore-parent', id: pid, onFail: 'ignore' }] });
    const bad = await kids.enqueue('bad', { parents: [{ queue: 'ignore-parent', id: pid, onFail: 'ignore' }] });
    const ran = [];
    work(parents, async (job) => void ran.push(await job.children()));
    work(kids, (job) => {
      if (job.payload === 'bad') throw new Error('ignored failure');
      return 'ok';
    });
    await waitFor(() => ran.length === 1, 'the parent to run');
    const children = ran[0];
    assert.deepEqual(tally(children), { acked: 1, dead: 1 });
    assert.equal(children.get(`ignore-kids:${good}`)?.data, 'ok');
    assert.match(String(children.get(`ignore-kids:${bad}`)?.data), /ignored failure/);
    await waitFor(async () => (await parents.job(pid))?.state === 'done', 'the parent done');
    assert.equal((await parents.job(pid)).finished, 2);
  });

  test('batch: the callback runs once, after every job, with the counts of acked and dead', async () => {
    const q = new Queue(client, 'batch-jobs');
    const jobs = Array.from({ length: 7 }, (_, n) => ({ payload: { n, fail: n % 3 === 0 } }));
    const { id, ids } = await q.batch(jobs, { onComplete: { queue: 'batch-done', payload: { report: 'nightly' } } });
    assert.deepEqual(ids, jobs.map((j) => j.id), 'the ids are written into the jobs');
    assert.equal(ids.length, 7);
    const done = new Queue(client, 'batch-done');
    assert.equal((await done.job(id)).children, 7);
    const seen = [];
    const callback = work(done, async (job) => {
      seen.push({ data: job.data, counts: tally(await job.children()) });
    });
    const jobsWorker = work(q, (job) => {
      if (job.data.fail) throw new Error(`job ${job.data.n} failed`);
      return job.data.n;
    });
    await waitFor(() => callback.counts.acked === 1, 'the callback acked');
    assert.equal(jobsWorker.counts.acked + jobsWorker.counts.failed, 7);
    assert.deepEqual(seen, [{ data: { report: 'nightly' }, counts: { acked: 4, dead: 3 } }]);
    const stats = await done.stats();
    assert.deepEqual([stats.pending, stats.active, stats.waiting, stats.scheduled], [0, 0, 0, 0]);
  });

  test('children() reads every page of a parent with more children than a page', async () => {
    const q = new Queue(client, 'many-kids');
    const n = CHILDREN_PAGE + 200;
    const { id } = await q.batch(Array.from({ length: n }, (_, i) => ({ payload: String(i) })), { onComplete: { queue: 'many-done', payload: 'all' } });
    const sizes = [];
    work(new Queue(client, 'many-done'), async (job) => void sizes.push(tally(await job.children())));
    work(q, (job) => job.payload, { concurrency: 32 });
    await waitFor(() => sizes.length === 1, 'the callback to run');
    assert.deepEqual(sizes, [{ acked: n }]);
    const children = await new Queue(client, 'many-done').children(id);
    assert.equal(children.size, n);
    assert.equal(new Set([...children.values()].map((c) => c.data)).size, n);
  });

  test('chain: each job runs after the one before it', async () => {
    const q = new Queue(client, 'chain');
    const jobs = ['a', 'b', 'c', 'd'].map((payload) => ({ payload }));
    const ids = await q.chain(jobs);
    assert.deepEqual(ids, jobs.map((j) => j.id));
    // Only the first is claimable; the rest wait for the one before.
    const stats = await q.stats();
    assert.deepEqual([stats.pending, stats.waiting], [1, 3]);
    const order = [];
    work(q, (job) => void order.push(job.payload), { concurrency: 4 });
    await waitFor(() => order.length === 4, 'the chain to run');
    assert.deepEqual(order, ['a', 'b', 'c', 'd']);
  });

  test('a flow, chain or batch node\'s timeout is its job\'s own', async () => {
    const q = new Queue(client, 'timed-flow');
    const tree = await q.flow({ payload: 'root', timeout: 5_000, children: [{ payload: 'leaf', timeout: 1_000 }, { payload: 'plain' }] });
    const [leaf, plain] = tree.children ?? [];
    assert.deepEqual([(await q.job(tree.id)).timeout, (await q.job(leaf.id)).timeout, (await q.job(plain.id)).timeout], [5_000, 1_000, undefined]);
    const [first, second] = await q.chain([{ payload: 'a', timeout: 2_000 }, { payload: 'b' }]);
    assert.deepEqual([(await q.job(first)).timeout, (await q.job(second)).timeout], [2_000, undefined]);
    const { id, ids } = await q.batch([{ payload: 'c', timeout: 3_000 }], { onComplete: { payload: 'done', timeout: 4_000 } });
    assert.deepEqual([(await q.job(ids[0])).timeout, (await q.job(id)).timeout], [3_000, 4_000]);
  });

  test('a flow retried with the same ids counts each child once', async () => {
    const q = new Queue(client, 'retried');
    const tree = {
      payload: 'root',
      children: [{ payload: 'left' }, { payload: 'right', queue: 'retried-side', children: [{ payload: 'leaf' }] }],
    };
    const built = await q.flow(tree);
    assert.equal(built, tree, 'the tree is returned with its ids written in');
    const right = tree.children[1];
    assert.equal(right.children[0].queue, 'retried', 'a node without a queue is the flow queue');
    assert.match(String(tree.id), /^JOB[0-9A-Za-z]{11}$/);
    // Again with the same tree, and with a copy of it (another process's retry, say).
    await q.flow(tree);
    await q.flow(JSON.parse(JSON.stringify(tree)));
    const root = await q.job(String(tree.id));
    assert.deepEqual([root.state, root.children, root.adopted], ['waiting', 2, 2]);
    assert.equal((await q.stats()).pending, 2, 'left and leaf, once each');
    const side = new Queue(client, 'retried-side');
    assert.deepEqual([(await side.job(String(right.id))).adopted, (await side.stats()).waiting], [1, 1]);
    const runs = new Map();
    const record = (job) => void runs.set(job.payload, (runs.get(job.payload) ?? 0) + 1);
    const seen = [];
    work(q, async (job) => {
      record(job);
      if (job.payload === 'root') seen.push(await job.children());
      return job.payload;
    });
    work(side, record);
    await waitFor(() => seen.length === 1, 'the root to run');
    assert.deepEqual(Object.fromEntries(runs), { left: 1, leaf: 1, right: 1, root: 1 });
    assert.deepEqual(tally(seen[0]), { acked: 2 });
    await waitFor(async () => (await q.job(String(tree.id)))?.state === 'done', 'the root done');
    assert.equal((await q.job(String(tree.id))).finished, 2);
    // A retry after the flow has run enqueues nothing again.
    await q.flow(tree);
    const stats = await q.stats();
    assert.deepEqual([stats.pending, stats.waiting], [0, 0]);
  });

  test('a parent in a partitioned queue: a child names its queue and id (or group), and counts in the parent\'s partition', async () => {
    await new Queue(client, 'wide-parents').span(4);
    const parents = new Queue(client, 'wide-parents');
    const byId = await parents.enqueue('by id', { children: 1 });
    const byGroup = await parents.enqueue('by group', { children: 1, group: 'acme' });
    const kids = new Queue(client, 'narrow-kids');
    const a = await kids.enqueue('a', { parents: [{ queue: 'wide-parents', id: byId }] });
    const b = await kids.enqueue('b', { parents: [{ queue: 'wide-parents', id: byGroup, group: 'acme' }] });
    assert.equal((await parents.job(byId))?.adopted, 1, 'found in the partition its id routes to');
    assert.equal((await parents.queueFor('acme').job(byGroup))?.adopted, 1, 'found in its group\'s');
    /** @type {Map<string, any>} */
    const seen = new Map();
    work(new Queue(client, 'wide-parents'), async (job) => void seen.set(job.payload, { queue: job.queue, children: await job.children() }));
    work(kids, (job) => job.payload);
    await waitFor(() => seen.size === 2, 'both parents to run');
    assert.equal(seen.get('by id').queue, partitionName('wide-parents', route(4, byId), 4));
    assert.equal(seen.get('by group').queue, partitionName('wide-parents', route(4, 'acme'), 4));
    assert.deepEqual([...seen.get('by id').children.keys()], [`narrow-kids:${a}`]);
    assert.deepEqual([...seen.get('by group').children.keys()], [`narrow-kids:${b}`]);

    // A parent queue spanned after the child's Queue read its width (0): the parent's refusal
    // has it read the width again.
    const late = new Queue(client, 'late-parents');
    const first = await late.enqueue('before', { children: 1 });
    await kids.enqueue('c', { parents: [{ queue: 'late-parents', id: first }] });
    assert.equal(await late.cancel(first), true, 'the queue holds no job then');
    await late.span(3);
    const second = await new Queue(client, 'late-parents').enqueue('after', { children: 1 });
    await kids.enqueue('d', { parents: [{ queue: 'late-parents', id: second }] });
    assert.equal((await late.job(second))?.adopted, 1);
  });

  test('a flow, a chain and a batch over partitioned queues: each child names the partition its parent went to', async () => {
    await new Queue(client, 'wide-root').span(3);
    await new Queue(client, 'wide-mid').span(5);
    const tree = await new Queue(client, 'wide-root').flow({
      payload: 'root',
      children: [0, 1, 2].map((m) => ({ queue: 'wide-mid', payload: `mid${m}`, children: [0, 1].map((l) => ({ queue: 'plain-leaf', payload: `leaf${m}.${l}` })) })),
    });
    assert.equal(tree.queue, 'wide-root', 'the tree keeps the queues it was given');
    const chain = await new Queue(client, 'wide-root').chain(['c1', 'c2', 'c3', 'c4'].map((payload) => ({ payload })));
    const batch = await new Queue(client, 'plain-leaf').batch(['b1', 'b2', 'b3'].map((payload) => ({ payload })), { onComplete: { queue: 'wide-mid', payload: 'callback' } });
    /** @type {string[]} */
    const order = [];
    /** @type {Map<string, number>} */
    const counted = new Map();
    const handle = async (job) => {
      order.push(job.payload);
      counted.set(job.payload, (await job.children()).size);
    };
    for (const q of ['wide-root', 'wide-mid', 'plain-leaf']) work(new Queue(client, q), handle, { concurrency: 4 });
    await waitFor(() => order.length === 10 + 4 + 4, 'every job to run');
    const at = (payload) => order.indexOf(payload);
    for (let m = 0; m < 3; m++) {
      assert.ok(at(`leaf${m}.0`) < at(`mid${m}`) && at(`leaf${m}.1`) < at(`mid${m}`), order.join(' '));
      assert.ok(at(`mid${m}`) < at('root'));
      assert.equal(counted.get(`mid${m}`), 2);
    }
    assert.equal(counted.get('root'), 3);
    assert.deepEqual(order.filter((p) => /^c\d$/.test(p)).slice(0, 4), ['c1', 'c2', 'c3', 'c4'], `chain ${chain}`);
    assert.ok(['b1', 'b2', 'b3'].every((p) => at(p) < at('callback')));
    assert.equal(counted.get('callback'), 3, `batch ${batch.id}`);
  });

  test('EMQPARENT: no such parent, a parent not waiting, a parent with all its children', async () => {
    const q = new Queue(client, 'orphans');
    /** Asserts an EmqParentError whose message says `why` (flows-protocol.md's words, or the
     * module's: `parent <q> <id> does not exist`, `is not waiting for children`, `has all its
     * <n> children`). */
    const refused = (why) => (e) => {
      assert.ok(e instanceof EmqParentError, String(e));
      assert.ok(e instanceof EmqError);
      assert.equal(e.code, 'EMQPARENT');
      assert.equal(e.name, 'EmqParentError');
      assert.match(e.message, why);
      return true;
    };
    const nobody = 'JOB00000000042';
    await assert.rejects(q.enqueue('x', { parents: [{ queue: 'orphans', id: nobody }] }), refused(/no such parent|does not exist/));
    const plain = await q.enqueue('a plain job');
    await assert.rejects(q.enqueue('x', { parents: [{ queue: 'orphans', id: plain }] }), refused(/not waiting/));
    const pid = await q.enqueue('parent of one', { children: 1 });
    await q.enqueue('first', { parents: [{ queue: 'orphans', id: pid }] });
    await assert.rejects(q.enqueue('second', { parents: [{ queue: 'orphans', id: pid }] }), refused(/all its (\d+ )?children/));
    assert.equal((await q.stats()).pending, 2, 'a refused child writes nothing');
  });

  test('flow options are checked before anything is sent', async () => {
    const q = new Queue(client, 'checked');
    const parent = { queue: 'checked', id: 'JOB00000000007' };
    const many = Array.from({ length: 17 }, (_, n) => ({ queue: `p${n}`, id: 'JOB00000000007' }));
    await assert.rejects(q.enqueue('x', { parents: many }), RangeError);
    await assert.rejects(q.enqueue('x', { parents: [parent, parent] }), TypeError);
    await assert.rejects(q.enqueue('x', { parents: [{ ...parent, onFail: /** @type {any} */ ('maybe') }] }), TypeError);
    await assert.rejects(q.enqueue('x', { children: 0 }), RangeError);
    await assert.rejects(q.enqueue('x', { children: 100_001 }), RangeError);
    const leaf = { payload: 'twice' };
    await assert.rejects(q.flow({ payload: 'root', children: [leaf, leaf] }), TypeError);
    await assert.rejects(q.flow({ payload: 'root', id: 'JOB00000000009', children: [{ payload: 'same', id: 'JOB00000000009' }] }), TypeError);
    await assert.rejects(q.chain([]), TypeError);
    await assert.rejects(q.batch([{ payload: 'x' }], /** @type {any} */ ({})), TypeError);
    // A child's priority, delay or time the server would refuse, found before its parent goes.
    for (const bad of [{ priority: 2_000_000 }, { priority: 1.5 }, { delay: -1 }, { delay: 366 * 86_400_000 }, { at: 2 ** 53 }, { delay: 1, at: Date.now() }]) {
      await assert.rejects(q.flow({ payload: 'root', children: [{ payload: 'kid', ...bad }] }), Error, JSON.stringify(bad));
    }
    // So are its timeout, its onFail and its payload.
    const kids = [{ timeout: 0.3 }, { timeout: -5 }, { timeout: 366 * 86_400_000 }, { onFail: 'never' }, { payload: 1n }, { payload: () => 1 }];
    for (const bad of kids) {
      await assert.rejects(q.flow({ payload: 'root', children: [{ payload: 'kid', ...bad }] }), Error, String(Object.keys(bad)));
    }
    assert.equal(await server.cmd('EXISTS', 'emq:{checked}:pending', 'emq:{checked}:waiting'), 0);
  });

  test('the outbox: a hand-over the acking user could not make is delivered by a worker sweep', async () => {
    // The kids' user may write only its own queue: the module leaves each hand-over to the
    // parent in the kids' outbox. That user's own sweeps are refused (NOPERM; the entries stay);
    // a worker that may write both delivers them.
    await server.cmd('ACL', 'SETUSER', 'kid', 'on', '>pw', '+@all', '~emq:{outbox-kids}:*');
    const kidClient = createClient({ url: `redis://kid:pw@127.0.0.1:${server.port}` });
    await kidClient.connect();
    try {
      const parents = new Queue(client, 'outbox-parent');
      const pid = await parents.enqueue('parent', { children: 3 });
      const kidIds = [];
      for (let n = 0; n < 3; n++) kidIds.push(await new Queue(client, 'outbox-kids').enqueue({ n }, { parents: [{ queue: 'outbox-parent', id: pid }] }));
      const restricted = work(new Queue(kidClient, 'outbox-kids'), (job) => job.data.n * 10);
      await waitFor(() => restricted.counts.acked === 3, 'the kids acked');
      await waitFor(() => restricted.errors.length > 0, 'the restricted sweep refused');
      assert.match(String(restricted.errors[0]), /NOPERM/);
      const outbox = await parents.sibling('outbox-kids').send(['EMQ.OUTBOX', 'outbox-kids'], true);
      assert.deepEqual(outbox[1].map((e) => e[0]).sort(), [...kidIds].sort(), 'the refused entries stay');
      assert.equal((await parents.job(pid)).state, 'waiting');
      // A worker killed between the two steps: the first kid handed over, its entry still there.
      const [cid, , , outcome, policy, data] = outbox[1].find((e) => e[0] === kidIds[0]);
      assert.equal(await parents.call('EMQ.HANDOVER', pid, 'outbox-kids', cid, outcome, policy, data), 'counted');
      await restricted.close();
      const delivered = [];
      const sweeper = work(new Queue(client, 'outbox-kids'), () => undefined);
      sweeper.on('delivered', (entry) => delivered.push(entry));
      const ran = [];
      work(parents, async (job) => void ran.push(await job.children()));
      await waitFor(() => ran.length === 1, 'the parent to run');
      // The last hand-over releases the parent before its DELIVERED is answered: wait for it.
      await waitFor(() => delivered.length === kidIds.length, 'the three entries delivered');
      assert.deepEqual(delivered.map((d) => d.id).sort(), [...kidIds].sort());
      assert.deepEqual(delivered.map((d) => d.reply).sort(), ['counted', 'counted', 'duplicate']);
      for (const d of delivered) assert.deepEqual([d.queue, d.parentQueue, d.parentId, d.outcome], ['outbox-kids', 'outbox-parent', pid, 'acked']);
      assert.deepEqual([...ran[0].values()].map((c) => c.data).sort(), ['0', '10', '20']);
      assert.equal((await parents.job(pid)).finished, 3, 'each kid counted once');
      assert.deepEqual(await server.cmd('EMQ.OUTBOX', 'outbox-kids'), ['0', []]);
    } finally {
      await kidClient.disconnect();
    }
  });

  test('cancelFlow: a waiting parent goes with its unstarted tree, each job counted', async () => {
    const albums = new Queue(client, 'cancel-albums');
    const tree = { payload: 'publish', children: [
      { queue: 'cancel-thumbs', payload: 't1' },
      { queue: 'cancel-thumbs', payload: 't2', children: [{ queue: 'cancel-crops', payload: 'c1' }] },
    ] };
    const built = await albums.flow(tree);
    const [t1, t2] = built.children;
    const [c1] = t2.children;
    assert.equal(await albums.cancelFlow(built.id), 4, 'the parent, both thumbs and the crop');
    for (const [queue, id] of [['cancel-albums', built.id], ['cancel-thumbs', t1.id], ['cancel-thumbs', t2.id], ['cancel-crops', c1.id]]) {
      assert.equal(await albums.sibling(queue).job(id), null, `${queue} ${id} is gone`);
    }
    assert.equal(await albums.cancelFlow(built.id), 0);
  });

  test('cancelFlow reads a layered graph once a job: each parent paged once, each child read once', async () => {
    // Three layers of 3 below the top, each job of a layer the child of all 3 above it (ON-FAIL
    // IGNORE: a cancelled child fails no other parent of it): read
    // once a path, the middle layer's children would be paged 9 times, not 3.
    const top = new Queue(client, 'layer-top');
    const tid = await top.enqueue('top', { children: 3 });
    let above = [{ queue: 'layer-top', id: tid }];
    for (const [n, name] of ['layer-a', 'layer-b', 'layer-c'].entries()) {
      const layer = [];
      for (let k = 0; k < 3; k++) {
        const parents = above.map((p) => ({ ...p, onFail: 'ignore' }));
        const options = n < 2 ? { children: 3, parents } : { parents };
        layer.push({ queue: name, id: await new Queue(client, name).enqueue(`${name}${k}`, options) });
      }
      above = layer;
    }
    await server.cmd('CONFIG', 'RESETSTAT');
    assert.equal(await top.cancelFlow(tid), 10, 'the top and its 9');
    const stats = String(await server.cmd('INFO', 'commandstats'));
    const calls = (/** @type {string} */ name) => Number(new RegExp(`cmdstat_${name}:calls=(\\d+)`).exec(stats)?.[1] ?? 0);
    assert.equal(calls('emq.children'), 7, 'the top and the 6 waiting parents, each once');
    assert.equal(calls('emq.job'), 18, 'each child read once before, looked up once after');
    assert.equal(calls('emq.cancel'), 10, 'the top and each child once');
  });

  test('cancelFlow: a child the user may not read is left, its parent still cancelled', async () => {
    const scopedClient = await scopedTo('scoped', 'scoped-top');
    try {
      const top = new Queue(client, 'scoped-top');
      const built = await top.flow({ payload: 'top', children: [
        { queue: 'scoped-top', payload: 'mine' },
        { queue: 'scoped-other', payload: 'not mine' },
      ] });
      const [mine, other] = built.children;
      assert.equal(await new Queue(scopedClient, 'scoped-top').cancelFlow(built.id), 2, 'the top and its child in its own queue');
      assert.equal(await top.job(mine.id), null);
      assert.equal((await top.sibling('scoped-other').job(other.id))?.state, 'pending', 'the child out of the user\'s keys runs on');
    } finally {
      await scopedClient.disconnect();
    }
  });

  test('cancelFlow: a failure after the parent went is EmqCancelIncomplete, with the children left', async () => {
    const top = new Queue(client, 'broken-top');
    const built = await top.flow({ payload: 'top', children: [
      { queue: 'broken-kids', payload: 'k1' },
      { queue: 'broken-kids', payload: 'k2', children: [{ queue: 'broken-crops', payload: 'c1' }] },
    ] });
    const [k1, k2] = built.children;
    // A client whose connection breaks after the parent's EMQ.CANCEL: every later call fails.
    let cancels = 0;
    const breaking = {
      sendCommand(/** @type {any[]} */ args, /** @type {any} */ options) {
        if (String(args[0]) === 'EMQ.CANCEL' && ++cancels > 1) return Promise.reject(new Error('the connection broke'));
        return client.sendCommand(args, options);
      },
    };
    const error = await new Queue(breaking, 'broken-top').cancelFlow(built.id).then(() => null, (e) => e);
    assert.ok(error instanceof EmqCancelIncomplete, String(error));
    assert.equal(error.cancelled, 1, 'the parent went');
    assert.deepEqual(error.remaining, [
      { queue: 'broken-kids', id: k1.id },
      { queue: 'broken-kids', id: k2.id },
      { queue: 'broken-crops', id: k2.children[0].id },
    ]);
    assert.equal(await top.job(built.id), null);
  });

  test('onEvent: each entry of the outbox is a handover and then a delivered event; a failed read of it an outbox event', async () => {
    // As above: the kids' user may not write the parent's keys, so each hand-over waits in the
    // kids' outbox. A user refused EMQ.OUTBOX cannot read it; a full user delivers it.
    await server.cmd('ACL', 'SETUSER', 'evkid', 'on', '>pw', '+@all', '~emq:{event-kids}:*');
    await server.cmd('ACL', 'SETUSER', 'blind', 'on', '>pw', '+@all', '-emq.outbox', '~*');
    const kidClient = createClient({ url: `redis://evkid:pw@127.0.0.1:${server.port}` });
    const blindClient = createClient({ url: `redis://blind:pw@127.0.0.1:${server.port}` });
    await kidClient.connect();
    await blindClient.connect();
    const steps = (/** @type {any[]} */ events) => events.filter((e) => ['handover', 'delivered', 'outbox'].includes(e.kind));
    try {
      const parents = new Queue(client, 'event-parent');
      const pid = await parents.enqueue('parent', { children: 2 });
      const kids = [];
      for (let n = 0; n < 2; n++) kids.push(await new Queue(client, 'event-kids').enqueue({ n }, { parents: [{ queue: 'event-parent', id: pid }] }));
      const refused = [];
      const restricted = work(new Queue(kidClient, 'event-kids'), () => 'done', { onEvent: (e) => refused.push(e) });
      await waitFor(() => restricted.counts.acked === 2 && new Set(steps(refused).map((e) => e.id)).size === 2, 'both hand-overs refused');
      await restricted.close();
      for (const e of steps(refused)) {
        assert.deepEqual([e.kind, e.outcome, e.token, e.queue], ['handover', 'refused', 0, 'event-kids'], 'a refused hand-over is not delivered');
        assert.match(e.error, /NOPERM/);
      }
      const unread = [];
      const blind = work(new Queue(blindClient, 'event-kids'), () => undefined, { onEvent: (e) => unread.push(e) });
      await waitFor(() => steps(unread).length > 0, 'the refused read of the outbox');
      await blind.close();
      const [read] = steps(unread);
      assert.deepEqual([read.kind, read.id, read.token, read.outcome, read.queue], ['outbox', '', 0, 'refused', 'event-kids']);
      assert.ok(steps(unread).every((e) => e.kind === 'outbox'), 'nothing read, nothing handed over');
      const events = [];
      work(new Queue(client, 'event-kids'), () => undefined, { name: 'sweeper', onEvent: (e) => events.push(e) });
      await waitFor(() => steps(events).filter((e) => e.kind === 'delivered').length === 2, 'both entries delivered');
      for (const kid of kids) {
        const mine = steps(events).filter((e) => e.id === kid);
        assert.deepEqual(mine.map((e) => [e.kind, e.outcome, e.token, e.queue, e.worker, e.replicated]), [
          ['handover', 'ok', 0, 'event-kids', 'sweeper', null],
          ['delivered', 'ok', 0, 'event-kids', 'sweeper', null],
        ]);
      }
      assert.equal(steps(events).filter((e) => e.kind === 'outbox').length, 0, 'a page read that went through is no event');
      assert.equal((await parents.job(pid)).finished, 2);
    } finally {
      await kidClient.disconnect();
      await blindClient.disconnect();
    }
  });

  test('the outbox: a hand-over whose parent is gone is delivered as an orphan, and the child says so', async () => {
    await server.cmd('ACL', 'SETUSER', 'lone', 'on', '>pw', '+@all', '~emq:{orphan-kids}:*');
    const loneClient = createClient({ url: `redis://lone:pw@127.0.0.1:${server.port}` });
    await loneClient.connect();
    try {
      const parents = new Queue(client, 'orphan-parent');
      const pid = await parents.enqueue('parent', { children: 2 });
      const kid = await new Queue(client, 'orphan-kids').enqueue('kid', { parents: [{ queue: 'orphan-parent', id: pid }] });
      const restricted = work(new Queue(loneClient, 'orphan-kids'), () => 'done');
      await waitFor(() => restricted.counts.acked === 1, 'the kid acked');
      await restricted.close();
      assert.equal(await parents.cancel(pid), true, 'a waiting parent is cancelled');
      const delivered = [];
      work(new Queue(client, 'orphan-kids'), () => undefined).on('delivered', (entry) => delivered.push(entry));
      await waitFor(() => delivered.length === 1, 'the orphan delivered');
      assert.deepEqual([delivered[0].id, delivered[0].reply], [kid, 'orphan']);
      const row = await new Queue(client, 'orphan-kids').job(kid);
      assert.match(String(row.orphan), /orphan-parent/);
      assert.match(String(row.orphan), new RegExp(pid));
      assert.deepEqual(await server.cmd('EMQ.OUTBOX', 'orphan-kids'), ['0', []]);
    } finally {
      await loneClient.disconnect();
    }
  });
});
