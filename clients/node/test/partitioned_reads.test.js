// A partitioned queue's schedules, listings and metrics through the Node client, on real
// servers (docs/cluster.md, "A queue bigger than one primary"): schedules kept by the partition
// their name routes to, the sets and groups walked partition by partition, the width read
// afresh where a stale one would miss what the queue holds, and the partitions' metrics added
// up; a Worker of a user not allowed EMQ.WIDTH claims the partitions, the width learned from its
// claim's refusal; the walk, the sums and which refusals of EMQ.WIDTH read as no width without
// a server too.
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { createClient } from 'redis';
import { EmqCursorError, Queue, Retry, mint, partitionName, route } from '../src/index.js';
import { plusHistogram, sumMetrics } from '../src/metrics.js';
import { knowWidth, widthUntold } from '../src/span.js';
import { splitCursor, walk } from '../src/walk.js';
import { Cluster } from './support/cluster.js';
import { commandStats, drain, idsIn } from './support/partitioned.js';
import { Server, until } from './support/server.js';

describe('a partitioned queue\'s schedules and listings on one server', () => {
  /** @type {Server} */
  let server;
  let client;
  before(async () => {
    server = await Server.start(['--emq.max-attempts', '2']);
    client = await server.connect();
  });
  after(() => server.stop());

  test('enableEvents and disableEvents act on each partition; the queue\'s own events are refused', async () => {
    const q = new Queue(client, 'wide-ev');
    await q.span(3);
    assert.equal(await q.enableEvents(), true);
    for (let n = 0; n < 3; n++) {
      const part = /** @type {string} */ (partitionName('wide-ev', n, 3));
      assert.equal(await server.cmd('EMQ.EVENTS', part, 'ON'), 0, `${part}'s stream is on`);
    }
    await assert.rejects(q.events().next(), RangeError);
    assert.equal(await q.disableEvents(), true);
  });

  test('a schedule set by a Queue that learned width 0 before the span, or holds a stale width, is routed once EMQSPANNED teaches the width', async () => {
    const name = 'cron-respanned';
    const late = new Queue(client, name);
    assert.equal(await late.width(), 0, 'an ordinary queue when asked');
    assert.equal(late.knownWidth, 0);
    const admin = new Queue(client, name);
    await admin.span(4);
    await server.cmd('CONFIG', 'RESETSTAT');
    assert.ok((await late.cron('nightly', 'n', { every: 3_600_000 })) > 0);
    assert.equal(late.knownWidth, 4);
    assert.deepEqual(await commandStats(server, 'EMQ.CRON'), { calls: 2, failed: 1 }, 'the queue\'s own name, then the partition');
    const four = admin.partitionQueues(4);
    assert.deepEqual((await four[route(4, 'nightly')].crons()).map((c) => c.name), ['nightly'], 'in the partition its name routes to');
    assert.deepEqual(await late.send(['EMQ.CRONS', name], true), [], 'the queue\'s own name keeps none');

    // Width 4 to 2 under `late`: the schedule's partition of 4 is retired (EMQSPANNED 0), the
    // queue's own name answers 2.
    const two = [0, 1].map((i) => partitionName(name, i, 2));
    const schedule = Array.from({ length: 200 }, (_, i) => `beat${i}`).find((n) => !two.includes(partitionName(name, route(4, n), 4)));
    assert.ok(schedule);
    assert.equal(await four[route(4, 'nightly')].uncron('nightly'), true, 'a partition holding a schedule is not retired');
    await admin.unspan();
    await admin.span(2);
    await server.cmd('CONFIG', 'RESETSTAT');
    assert.ok((await late.cron(schedule, 'b', { every: 3_600_000 })) > 0);
    assert.equal(late.knownWidth, 2);
    assert.deepEqual(await commandStats(server, 'EMQ.CRON'), { calls: 3, failed: 2 }, 'the retired partition, the queue, then its partition of 2');
    const parts = admin.partitionQueues(2);
    assert.deepEqual((await parts[route(2, schedule)].crons()).map((c) => c.name), [schedule]);
    assert.deepEqual((await parts[1 - route(2, schedule)].crons()).map((c) => c.name), []);
  });

  test('crons(), uncron and a walk from 0 read the width afresh: a Queue holding a stale width finds the schedules, jobs and groups of the queue spanned again', async () => {
    const name = 'respanned-listings';
    const admin = new Queue(client, name);
    await admin.span(2);
    // Queues that learned width 2, one for each call (each learns the new width).
    const stale = await Promise.all(
      Array.from({ length: 5 }, async () => {
        const q = new Queue(client, name);
        assert.equal(await q.width(), 2);
        return q;
      }),
    );
    const [lister, remover, jobsReader, groupsReader, measurer] = stale;
    assert.ok((await lister.cron('old', 'x', { every: 3_600_000 })) > 0);
    await lister.enqueue('old job');
    // Drained, unspanned and spanned again over 4 by another Queue.
    assert.equal(await admin.uncron('old'), true);
    assert.equal(await admin.purge('pending'), 1);
    await admin.unspan();
    await admin.span(4);

    const two = admin.partitionQueues(2).map((p) => p.name);
    const four = admin.partitionQueues(4);
    /** Whether `key`'s partition of 4 is none the width of 2 would look in. */
    const moved = (key) => !two.includes(four[route(4, key)].name);
    const names = Array.from({ length: 12 }, (_, i) => `sched-${i}`);
    assert.ok(names.some(moved), 'a schedule in a partition the stale width does not list');
    for (const n of names) await admin.cron(n, n, { every: 3_600_000 });
    const ids = Array.from({ length: 20 }, () => mint());
    assert.ok(ids.some(moved), 'a job in a partition the stale width does not walk');
    await admin.enqueueMany(ids.map((id) => ({ id, payload: id })));
    const groups = Array.from({ length: 8 }, (_, i) => `tenant-${i}`);
    assert.ok(groups.some(moved), 'a group in a partition the stale width does not walk');
    for (const group of groups) await admin.enqueue(group, { group });
    assert.deepEqual(stale.map((q) => q.knownWidth), [2, 2, 2, 2, 2]);

    assert.deepEqual((await lister.crons()).map((c) => c.name), [...names].sort());
    assert.equal(lister.knownWidth, 4);
    const gone = /** @type {string} */ (names.find(moved));
    assert.equal(await remover.uncron(gone), true, 'removed from the partition of 4 its name routes to');
    assert.equal(remover.knownWidth, 4);
    assert.deepEqual((await four[route(4, gone)].crons()).map((c) => c.name).filter((n) => n === gone), []);
    assert.deepEqual([...(await idsIn(jobsReader))].sort(), [...ids].sort());
    assert.equal(jobsReader.knownWidth, 4);
    /** @type {string[]} */
    const seen = [];
    let cursor = '0';
    do {
      const page = await groupsReader.groups({ cursor });
      seen.push(...page.groups.map((g) => String(g.group)));
      cursor = page.cursor;
    } while (cursor !== '0');
    assert.deepEqual(seen.sort(), [...groups].sort());
    assert.equal(groupsReader.knownWidth, 4);
    await measurer.metrics();
    assert.equal(measurer.knownWidth, 2, 'metrics() goes by the width known');
  });

  test('a Worker of a user not allowed EMQ.WIDTH learns a partitioned queue\'s width from its claim\'s EMQSPANNED, keeps it, and drains the jobs from their partitions', async () => {
    await server.cmd('ACL', 'SETUSER', 'nowidth', 'on', '>pw', '+@all', '-emq.width', '~*');
    const user = createClient({ url: `redis://nowidth:pw@127.0.0.1:${server.port}` });
    await user.connect();
    try {
      await new Queue(client, 'wide-acl').span(3);
      const ids = await new Queue(client, 'wide-acl').enqueueMany(Array.from({ length: 10 }, (_, n) => ({ payload: `a${n}` })));
      const limited = new Queue(user, 'wide-acl');
      // Its blocking claims time out on the idle partitions, and the width reads refused after
      // them keep the 3 the queue's own name refused the first claim with.
      const { worker, runs, queues, errors, done } = await drain(limited, 10, { block: 100 });
      try {
        assert.ok(done, `${worker.counts.acked} of 10 handled`);
        await new Promise((resolve) => setTimeout(resolve, 500));
        ids.push(...(await new Queue(user, 'wide-acl').enqueueMany(Array.from({ length: 10 }, (_, n) => ({ payload: `b${n}` })))));
        assert.ok(await until(() => worker.counts.acked >= 20, 30_000), `${worker.counts.acked} of 20 handled`);
      } finally {
        await worker.close();
      }
      assert.equal(limited.knownWidth, 3);
      assert.deepEqual(errors, []);
      assert.deepEqual([...runs.keys()].sort(), [...ids].sort());
      assert.ok([...runs.values()].every((n) => n === 1), 'each job once');
      for (const id of ids) assert.equal(queues.get(id), partitionName('wide-acl', route(3, id), 3), id);
    } finally {
      await user.disconnect();
    }
  });

  test('crons() lists a partitioned queue\'s schedules by their names\' UTF-8 bytes, the order the server gives one queue\'s', async () => {
    // U+FFFD is EF BF BD in UTF-8, U+1F600 F0 9F 98 80: bytes put U+FFFD first, UTF-16 code
    // units (JS `<`) the emoji's surrogate (D83D) first.
    const names = ['\u{1F600}', '\uFFFD', 'z', 'a\u{1F600}', 'a\uFFFD'];
    const bytes = [...names].sort((a, b) => Buffer.compare(Buffer.from(a), Buffer.from(b)));
    assert.deepEqual(bytes, ['a\uFFFD', 'a\u{1F600}', 'z', '\uFFFD', '\u{1F600}']);
    assert.notDeepEqual(bytes, [...names].sort(), 'the two orders differ');
    const q = new Queue(client, 'sorted-crons');
    await q.span(4);
    assert.ok(new Set(names.map((n) => route(4, n))).size > 1, 'the names route to several partitions');
    for (const name of names) await q.cron(name, name, { every: 3_600_000 });
    assert.deepEqual((await q.crons()).map((c) => c.name), bytes);
    const plain = new Queue(client, 'sorted-crons-plain');
    for (const name of names) await plain.cron(name, name, { every: 3_600_000 });
    assert.deepEqual((await plain.crons()).map((c) => c.name), bytes, 'the server\'s order');
  });
});

describe('a partitioned queue\'s schedules, listings and metrics on a cluster', () => {
  /** @type {Cluster} */
  let cluster;
  let client;
  before(async () => {
    cluster = await Cluster.start(3);
    client = await cluster.connect();
  });
  after(() => cluster?.stop());

  test('cron and uncron go to the partition the schedule\'s name routes to; crons() lists every partition\'s, by name', async () => {
    await new Queue(client, 'beats').span(12);
    const names = ['nightly', 'hourly', 'digest', 'cleanup', 'backup', 'report', 'audit', 'sweep'];
    assert.ok(new Set(names.map((n) => route(12, n))).size > 1, 'the names route to several partitions');
    const q = new Queue(client, 'beats');
    for (const [i, name] of names.entries()) assert.ok((await q.cron(name, { n: i }, { every: 3_600_000, priority: i })) > 0);
    assert.equal(q.knownWidth, 12, 'EMQ.WIDTH asked');
    const parts = await q.partitions();
    for (const [i, part] of parts.entries()) {
      const here = (await part.crons()).map((c) => c.name).sort();
      assert.deepEqual(here, names.filter((n) => route(12, n) === i).sort(), `partition ${i} keeps the schedules that route to it`);
    }
    assert.deepEqual(await q.send(['EMQ.CRONS', 'beats'], true), [], 'the queue\'s own name keeps none');

    const all = await new Queue(client, 'beats').crons();
    assert.deepEqual(all.map((c) => c.name), [...names].sort(), 'every partition\'s, sorted by name');
    for (const c of all) {
      const i = names.indexOf(c.name);
      assert.deepEqual([JSON.parse(c.payload), Number(c.every), Number(c.priority)], [{ n: i }, 3_600_000, i]);
    }

    const gone = new Queue(client, 'beats');
    assert.equal(await gone.uncron('digest'), true);
    assert.equal(await gone.uncron('digest'), false);
    assert.equal(await gone.uncron('no such schedule'), false);
    assert.deepEqual((await q.crons()).map((c) => c.name), names.filter((n) => n !== 'digest').sort());
    assert.ok(!(await parts[route(12, 'digest')].crons()).some((c) => c.name === 'digest'), 'gone from its partition');
    await assert.rejects(gone.cron('x', 'y', {}), TypeError);
  });

  test('jobs() walks the partitions in turn with a small count: each job once, a page from one partition, empty partitions passed over, ending at 0', async () => {
    const q = new Queue(client, 'walked');
    await q.span(12);
    // 60 jobs, none in partitions 0, 5 and 6: the walk must pass over them within a call.
    const empty = new Set([0, 5, 6]);
    const ids = [];
    while (ids.length < 60) {
      const id = mint();
      if (!empty.has(route(12, id))) ids.push(id);
    }
    await q.enqueueMany(ids.map((id, n) => ({ id, payload: `p${n}` })));

    const reader = new Queue(client, 'walked');
    /** @type {string[]} */
    const seen = [];
    /** @type {Array<{cursor: string, partitions: number[]}>} */
    const pages = [];
    let cursor = '0';
    do {
      const page = await reader.jobs('pending', { cursor, count: 4, withPayloads: true });
      for (const job of page.jobs) {
        seen.push(job.id);
        assert.equal(job.payload, `p${ids.indexOf(job.id)}`);
      }
      pages.push({ cursor: page.cursor, partitions: [...new Set(page.jobs.map((j) => route(12, j.id)))] });
      cursor = page.cursor;
      assert.ok(pages.length <= 60, 'the walk ends');
    } while (cursor !== '0');
    assert.equal(seen.length, 60, 'each job once');
    assert.deepEqual([...seen].sort(), [...ids].sort());
    let last = -1;
    for (const [i, page] of pages.entries()) {
      if (i < pages.length - 1) assert.equal(page.partitions.length, 1, `page ${i} holds jobs, of one partition`);
      assert.ok(page.partitions.length <= 1, `page ${i} is one partition's`);
      if (page.partitions.length === 0) continue;
      const [from] = page.partitions;
      assert.ok(from >= last, 'the partitions in turn');
      assert.ok(!empty.has(from));
      last = from;
      const [index, inner] = [Number(page.cursor.split(':', 1)[0]), page.cursor.slice(page.cursor.indexOf(':') + 1)];
      if (page.cursor === '0') assert.equal(i, pages.length - 1);
      else if (inner === '0') assert.ok(index > from, `${page.cursor}: the next partition`);
      else assert.equal(index, from, `${page.cursor}: more of the same partition`);
    }
    // Each partition's jobs took ceil(k / 4) pages.
    const per = Array.from({ length: 12 }, (_, i) => ids.filter((id) => route(12, id) === i).length);
    assert.equal(pages.filter((p) => p.partitions.length > 0).length, per.reduce((n, k) => n + Math.ceil(k / 4), 0));

    // A set empty in every partition: one call walks them all, to one empty page.
    assert.deepEqual(await reader.jobs('dead', { count: 4 }), { cursor: '0', jobs: [] });
    // A cursor from the middle resumes there.
    const mid = pages[Math.floor(pages.length / 2)].cursor;
    const rest = [];
    cursor = mid;
    while (cursor !== '0') {
      const page = await reader.jobs('pending', { cursor, count: 4 });
      rest.push(...page.jobs.map((j) => j.id));
      cursor = page.cursor;
    }
    assert.deepEqual(rest, seen.slice(seen.length - rest.length));
  });

  test('groups() walks the partitions in turn: each group once, ending at 0', async () => {
    const q = new Queue(client, 'tenanted');
    await q.span(4);
    const groups = Array.from({ length: 30 }, (_, i) => `tenant-${i}`);
    for (const group of groups) for (let j = 0; j < 2; j++) await q.enqueue({ group, j }, { group });
    const reader = new Queue(client, 'tenanted');
    /** @type {string[]} */
    const seen = [];
    let cursor = '0';
    let pages = 0;
    let last = -1;
    do {
      const page = await reader.groups({ cursor, count: 3 });
      pages++;
      const from = [...new Set(page.groups.map((g) => route(4, String(g.group))))];
      assert.ok(from.length === 1 || page.cursor === '0', `a page of one partition's groups (${page.cursor})`);
      if (from.length === 1) {
        assert.ok(from[0] >= last, 'the partitions in turn');
        last = from[0];
      }
      for (const g of page.groups) {
        seen.push(String(g.group));
        assert.equal(Number(g.ready), 2);
      }
      cursor = page.cursor;
      assert.ok(pages <= 60, 'the walk ends');
    } while (cursor !== '0');
    assert.equal(seen.length, 30, 'each group once');
    assert.deepEqual([...seen].sort(), [...groups].sort());
    assert.equal((await new Queue(client, 'tenanted').stats()).groups, 30);
  });

  test('metrics() adds up its partitions\': counters and histograms summed, the oldest wait the longest', async () => {
    const name = 'measured';
    await new Queue(client, name).span(4);
    const producer = new Queue(client, name);
    await producer.enqueueMany(Array.from({ length: 40 }, (_, n) => ({ payload: { n } })));
    // A few fail their first attempt: the run histograms `failed` and `acked` both count.
    const { worker, errors, done } = await drain(new Queue(client, name), 40, {}, (job) => {
      if (job.data.n % 8 === 0 && job.attempt === 1) throw new Retry(0);
    });
    await worker.close();
    assert.ok(done);
    assert.deepEqual(errors, []);
    // Left pending, so the oldest wait is some partition's.
    await producer.enqueueMany(Array.from({ length: 6 }, (_, n) => ({ payload: { late: n } })));
    const parts = await producer.partitions();
    const before = await Promise.all(parts.map((p) => p.metrics()));
    const whole = await new Queue(client, name).metrics();
    const after = await Promise.all(parts.map((p) => p.metrics()));

    /** @param {import('../index.js').Histogram[]} hs */
    const added = (hs) => ({
      count: hs.reduce((n, h) => n + h.count, 0),
      sumMs: hs.reduce((n, h) => n + h.sumMs, 0),
      buckets: hs[0].buckets.map(([le], i) => [le, hs.reduce((n, h) => n + h.buckets[i][1], 0)]),
    });
    for (const h of before.flatMap((m) => [m.wait, m.endToEnd, ...Object.values(m.run)])) {
      assert.deepEqual(h.buckets.map(([le]) => le), before[0].wait.buckets.map(([le]) => le), 'the same bounds on every partition');
    }
    const events = {};
    for (const m of before) for (const [k, v] of Object.entries(m.events)) events[k] = (events[k] ?? 0) + v;
    assert.deepEqual(whole.events, events);
    assert.equal(whole.events.acked, 40);
    assert.equal(whole.events.enqueued, 46);
    assert.equal(whole.events.retrying, 5);
    assert.deepEqual(whole.wait, added(before.map((m) => m.wait)));
    assert.deepEqual(whole.endToEnd, added(before.map((m) => m.endToEnd)));
    assert.deepEqual(Object.keys(whole.run).sort(), Object.keys(before[0].run).sort());
    for (const end of Object.keys(whole.run)) assert.deepEqual(whole.run[end], added(before.map((m) => m.run[end])), end);
    assert.equal(whole.run.acked.count, 40);
    assert.equal(whole.run.failed.count, 5);
    assert.equal(whole.enabled, true);
    assert.deepEqual(after.map((m) => m.events), before.map((m) => m.events), 'nothing happened between the readings');
    // The pending jobs wait on: the longest of the partitions', read between two readings.
    const longest = (ms) => Math.max(...ms.map((m) => m.oldestPendingMs ?? -1));
    assert.ok(longest(before) >= 0);
    assert.ok(whole.oldestPendingMs !== null && whole.oldestPendingMs >= longest(before) && whole.oldestPendingMs <= longest(after));
  });

  test('a cursor whose partition is not one of the queue\'s is refused (RangeError, TypeError) before any page is read; the cursor there, and an ordinary queue\'s, the server checks', async () => {
    await new Queue(client, 'cursors').span(4);
    const q = new Queue(client, 'cursors');
    await q.enqueue('x');
    const fresh = new Queue(client, 'cursors');
    await Promise.all(cluster.nodes.map((n) => n.cmd('CONFIG', 'RESETSTAT')));
    for (const cursor of ['4:0', '12:0', 'x', '1', '01:0', '1:', '-1:0', ':0', ' 0:0', '1e0:0']) {
      await assert.rejects(q.jobs('pending', { cursor }), RangeError, cursor);
      await assert.rejects(q.groups({ cursor }), RangeError, cursor);
    }
    await assert.rejects(fresh.jobs('pending', { cursor: '9:0' }), RangeError, 'a Queue that reads the width first');
    await assert.rejects(q.jobs('pending', { cursor: /** @type {any} */ (3) }), TypeError);
    const sent = async (command) => (await Promise.all(cluster.nodes.map((n) => commandStats(n, command)))).reduce((n, s) => n + s.calls, 0);
    assert.equal(await sent('EMQ.JOBS'), 0, 'no page read');
    assert.equal(await sent('EMQ.GROUPS'), 0, 'no page read');
    assert.equal(await sent('EMQ.WIDTH'), 1, 'the fresh Queue read the width');
    // A cursor a page gave is taken.
    assert.equal((await q.jobs('pending', { cursor: '3:0' })).cursor, '0');
    // The cursor there is passed on: the partition's server judges it (EMQ.GROUPS's is a number).
    await assert.rejects(q.jobs('pending', { cursor: '1:x' }), EmqCursorError);
    await assert.rejects(q.groups({ cursor: '1:x' }), /ERR CURSOR must be an integer/);
    // An ordinary queue's cursor is the server's to judge, as ever.
    await assert.rejects(new Queue(client, 'cursors-plain').jobs('pending', { cursor: 'x' }), EmqCursorError);
  });
});

describe('a partitioned queue\'s walk and metrics, without a server', () => {
  test('only EMQ.WIDTH refused as a command, or unknown, reads as no width; a width known then stands', async () => {
    class ErrorReply extends Error {}
    const untold = [
      "NOPERM User nowidth has no permissions to run the 'emq.width' command",
      "NOPERM this user has no permissions to run the 'emq.width' command or its subcommand",
      "ERR unknown command 'EMQ.WIDTH', with args beginning with: 'q' ",
    ];
    const told = ['NOPERM No permissions to access a key', 'NOPERM No permissions to access a channel', 'ERR has no permissions to run', 'LOADING the server is loading'];
    for (const m of untold) assert.ok(widthUntold(new ErrorReply(m)), m);
    for (const m of told) assert.ok(!widthUntold(new ErrorReply(m)), m);
    assert.ok(!widthUntold(new Error(untold[0])), 'not a server\'s reply');
    assert.ok(widthUntold(Object.assign(new Error('wrapped'), { cause: new ErrorReply(untold[0]) })));
    const refusing = (message, knownWidth) => ({ knownWidth, width: () => Promise.reject(new ErrorReply(message)) });
    const fresh = refusing(untold[0], undefined);
    await knowWidth(/** @type {any} */ (fresh));
    assert.equal(fresh.knownWidth, 0, 'none known: 0 learned');
    const known = refusing(untold[0], 3);
    await knowWidth(/** @type {any} */ (known));
    assert.equal(known.knownWidth, 3, 'the width known stands');
    const key = refusing(told[0], 3);
    await assert.rejects(knowWidth(/** @type {any} */ (key)), /access a key/);
    assert.equal(key.knownWidth, 3);
  });

  test('splitCursor reads 0 and <index>:<inner> below the width, and refuses anything else', () => {
    assert.deepEqual(splitCursor('0', 4), { index: 0, inner: '0' });
    assert.deepEqual(splitCursor('3:0', 4), { index: 3, inner: '0' });
    assert.deepEqual(splitCursor('1:0:JOB0KHTOWnGLuC', 4), { index: 1, inner: '0:JOB0KHTOWnGLuC' }, 'the inner cursor keeps its own colon');
    assert.deepEqual(splitCursor('1023:0', 1024), { index: 1023, inner: '0' });
    for (const bad of ['4:0', '', 'x', '3', '03:0', '3:', ':0', '-1:0', '1.0:0', '10000:0']) assert.throws(() => splitCursor(bad, 4), RangeError, bad);
    assert.throws(() => splitCursor(0, 4), TypeError);
  });

  test('a walk passes over finished empty pages in one call, and answers an empty page only at its end', async () => {
    // Partition i's pages, by inner cursor: [rows, next].
    const pages = [
      { 0: [[], '0'] },
      { 0: [['a', 'b'], 'b'], b: [['c'], '0'] },
      { 0: [[], '0'] },
      { 0: [['d'], '0'] },
      { 0: [[], '0'] },
    ];
    const parts = pages.map((_, i) => /** @type {any} */ ({ i }));
    /** @type {string[]} */
    const reads = [];
    const read = async (part, inner) => {
      reads.push(`${part.i}:${inner}`);
      const [rows, cursor] = pages[part.i][inner];
      return { cursor, rows };
    };
    const got = [];
    let cursor = '0';
    do {
      const page = await walk(parts, cursor, read);
      got.push([page.rows.join(''), page.cursor]);
      cursor = page.cursor;
    } while (cursor !== '0');
    assert.deepEqual(got, [['ab', '1:b'], ['c', '2:0'], ['d', '4:0'], ['', '0']]);
    assert.deepEqual(reads, ['0:0', '1:0', '1:b', '2:0', '3:0', '4:0']);
    assert.deepEqual(await walk([parts[0]], '0', read), { cursor: '0', rows: [] });
  });

  test('metrics add up bucket by bucket; buckets that differ keep the histogram with more counted; enabled only when every partition is', () => {
    const h = (count, buckets) => ({ count, sumMs: count * 10, buckets });
    assert.deepEqual(plusHistogram(h(3, [[1, 1], [5, 3], [null, 3]]), h(2, [[1, 0], [5, 2], [null, 2]])), h(5, [[1, 1], [5, 5], [null, 5]]));
    const other = h(4, [[2, 4], [null, 4]]);
    assert.deepEqual(plusHistogram(h(3, [[1, 1], [null, 3]]), other), other);
    const m = (acked, oldest, enabled) => ({ enabled, events: { acked }, wait: h(acked, [[1, acked]]), run: { acked: h(acked, [[1, acked]]) }, endToEnd: h(acked, [[1, acked]]), oldestPendingMs: oldest });
    const sum = sumMetrics([m(1, null, true), m(2, 70, false), m(3, 30, false)]);
    assert.deepEqual(sum, { enabled: false, events: { acked: 6 }, wait: h(6, [[1, 6]]), run: { acked: h(6, [[1, 6]]) }, endToEnd: h(6, [[1, 6]]), oldestPendingMs: 70 });
    assert.equal(sumMetrics([m(1, null, true), m(1, null, true)]).oldestPendingMs, null);
    // Enabled only when every partition is, whichever comes first.
    assert.equal(sumMetrics([m(1, null, true), m(1, null, true)]).enabled, true);
    assert.equal(sumMetrics([m(1, null, true), m(1, null, false)]).enabled, false);
    assert.equal(sumMetrics([m(1, null, false), m(1, null, true)]).enabled, false);
  });
});
