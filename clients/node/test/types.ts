// A typed use of the package, checked by `make lint` (tsc --noEmit --strict): every call of
// the README, so the declarations in index.d.ts stay true to how the package is used.
import { createClient, createCluster } from 'redis';
import {
  EmqCancelledError,
  EmqTimeoutError,
  EmqError,
  EmqLeaseError,
  EmqNotReplicatedError,
  EmqParentError,
  EmqSpanError,
  EmqSpannedError,
  Job,
  Metrics,
  Queue,
  Retry,
  Worker,
  queueSlot,
  type BuiltFlowNode,
  type ChildOutcome,
  type Children,
  type FlowNode,
  type GroupInfo,
  type GroupLimits,
  type Handover,
  type QueueEvent,
  type Stats,
  quantileBound,
  formatTraceparent,
  parseTraceparent,
  MAX_HEADERS,
  type TraceContext,
  type WorkerEvent,
  MAX_PARTITIONS,
  partitionName,
  route,
  share,
  fnv1a32,
} from 'echomq';

export async function producer(): Promise<void> {
  const client = createClient({ url: 'redis://127.0.0.1:6379' });
  await client.connect();
  const q = new Queue(client, 'emails');
  const id: string = await q.enqueue({ to: 'ann' }, { delay: 60_000, priority: -1, unique: 'welcome:ann', uniqueFor: 86_400_000 });
  await q.enqueue('raw', { at: new Date() });
  const ids: string[] = await q.enqueueMany([{ payload: { n: 1 } }, { payload: 'x', priority: 2, id }]);
  const stats: Stats = await q.stats();
  const active: number = stats.active;
  const metrics: Metrics = await q.metrics();
  const acked: number | undefined = metrics.events.acked;
  const runBound: number | null = quantileBound(metrics.run.acked, 0.99);
  const oldest: number | null = metrics.oldestPendingMs;
  const row = await q.job(ids[0]);
  const attempts: number | undefined = row?.attempts;
  const cancelledToken: number | undefined = row?.cancelled;
  const page = await q.jobs('dead', { count: 10, withPayloads: true });
  const next: string = page.cursor;
  const purged: number = await q.purge('dead', { count: 100 });
  const moved: boolean = (await q.requeue(id)) || (await q.cancel(id));
  const cancelled: number = await q.cancelFlow(id);
  const unstarted: number = await q.cancelUnstarted(id);
  const requeued: number = await q.requeueDead({ count: 10 });
  await q.pause();
  await q.resume();
  const limits = await q.limit({ concurrency: 3, rate: 100, per: 60_000 });
  const cap: number | null = limits.concurrency;
  const queueTimeout: number | null = (await q.limit({ timeout: 60_000 })).timeout ?? (await q.limit({ timeout: null })).timeout;
  const timed: string = await q.enqueue('x', { timeout: 300 });
  const deadline: string | undefined = (await q.job(timed))?.deadline;
  const statsTimeout: number | null = stats.timeout;
  const tenant: string = await q.enqueue('x', { group: 'tenant-42' });
  const group: string | undefined = (await q.job(tenant))?.group;
  const traced = new Queue(client, 'emails', { inject: (carrier) => void (carrier.traceparent = formatTraceparent({ traceId: 'ab'.repeat(16), spanId: 'cd'.repeat(8) })) });
  const headed: string = await traced.enqueue('x', { headers: { tenant: 'acme' } });
  const tenantHeader: string | undefined = (await q.job(headed))?.headers?.tenant;
  await q.enqueueMany([{ payload: 'x', headers: { k: 'v' } }]);
  const groups: number = stats.groups;
  const groupDefault: number | null = (await q.limit({ concurrency: 200, groupConcurrency: 4, groupRate: 10, groupPer: 60_000 }))['group-concurrency'];
  const statsGroupRate: number | null = stats['group-rate'];
  const own: GroupLimits = await q.groupLimit('bigcorp', { concurrency: 20, rate: 100, per: 60_000 });
  const ownLimit: number | null = (await q.groupLimit('bigcorp', { concurrency: null })).concurrency;
  const held: number = (await q.groupLimit('bigcorp')).held;
  const paused: boolean = (await q.pauseGroup('acme', { ms: 30_000 })) || (await q.pauseGroup('acme'));
  const resumed: boolean = await q.resumeGroup('acme');
  const groupPage = await q.groups({ cursor: '0', count: 50 });
  const nextGroups: string = groupPage.cursor;
  const biggest: GroupInfo | undefined = groupPage.groups[0];
  const until: number | null | undefined = biggest?.['paused-until'];
  void [groupDefault, statsGroupRate, own, ownLimit, held, paused, resumed, nextGroups, until];
  const at: number = await q.cron('nightly', { report: 'daily' }, { spec: '0 3 * * *' });
  await q.cron('beat', 'ping', { every: 60_000, priority: -1 });
  const names: string[] = (await q.crons()).map((c) => c.name);
  await q.uncron('beat');
  await q.enableEvents({ maxlen: 1000 });
  for await (const e of q.events({ from: '0', block: 500 })) {
    const event: QueueEvent['event'] = e.event;
    if (event === 'acked') break;
  }
  void [active, attempts, cancelledToken, next, purged, moved, cancelled, unstarted, requeued, cap, queueTimeout, deadline, statsTimeout, group, groups, at, names, tenantHeader];
  await client.quit();
}

export async function flows(): Promise<void> {
  const client = createClient({ url: 'redis://127.0.0.1:6379' });
  await client.connect();
  const q = new Queue(client, 'reports');
  const parent: string = await q.enqueue({ report: 'monthly' }, { children: 2 });
  await q.enqueue('part', { parents: [{ queue: 'reports', id: parent, onFail: 'ignore' }] });
  try {
    await q.enqueue('late', { parents: [{ queue: 'reports', id: parent }] });
  } catch (e) {
    if (e instanceof EmqParentError) console.log(e.code);
  }
  const tree: FlowNode = { payload: 'root', timeout: 60_000, children: [{ queue: 'pdf', payload: { page: 1 }, onFail: 'fail' }, { payload: 'x', priority: 1, group: 'acme' }] };
  const built: BuiltFlowNode = await q.flow(tree);
  const rootId: string = built.id;
  const childIds: string[] = (built.children ?? []).map((c) => c.id);
  const order: string[] = await q.chain([{ payload: 'fetch' }, { payload: 'parse', queue: 'parsers' }, { payload: 'store' }]);
  const { id, ids } = await q.batch([{ payload: 1 }, { payload: 2 }], { onComplete: { queue: 'done', payload: 'all' } });
  const children: Children = await q.children(id);
  const first: ChildOutcome | undefined = children.get(`reports:${ids[0]}`);
  const status: 'waiting' | 'acked' | 'dead' | 'cancelled' | undefined = first?.status;
  const waiting: number = (await q.stats()).waiting;
  const parents: number = (await q.jobs('waiting')).jobs.length;
  const row = await q.job(rootId);
  const finished: number | undefined = row?.finished;
  const sameSlot: boolean = queueSlot('reports') === queueSlot('pdf');
  const w = new Worker(q, async (job: Job) => {
    const trace: TraceContext | null = job.trace;
    const tenantOf: string | undefined = job.headers.tenant;
    void [trace, tenantOf, parseTraceparent(job.headers.traceparent)?.traceId, MAX_HEADERS];
    const kids = await job.children();
    let acked = 0;
    for (const [key, { status, data }] of kids) if (status === 'acked' && key.endsWith(data ?? '')) acked++;
    return { acked };
  });
  const events: WorkerEvent[] = [];
  const wrapped = new Worker(q, () => 'ok', { around: (job, run) => (job.trace ? run() : run()) });
  void wrapped;
  const watched = new Worker(q, () => 'ok', { name: 'w1', onEvent: (e) => void events.push(e), waitReplicas: 1, waitTimeout: 500 });
  const took: bigint = events.length > 0 ? events[0].answeredNs - events[0].sentNs : 0n;
  const who: string = watched.name;
  const unconfirmed = events.filter((e) => e.kind === 'handover' && e.replicated === false).map((e) => e.id);
  void [took, who, unconfirmed];
  w.on('delivered', (entry: Handover) => console.log(entry.parentQueue, entry.parentId, entry.reply));
  await w.close();
  void [childIds, order, first, status, waiting, parents, finished, sameSlot];
  await client.quit();
}

export async function partitioned(): Promise<void> {
  const cluster = createCluster({ rootNodes: [{ url: 'redis://127.0.0.1:7001' }] });
  await cluster.connect();
  const orders = new Queue(cluster, 'orders');
  const changed: boolean = await orders.span(12);
  const width: number = await orders.width();
  const known: number | undefined = orders.knownWidth;
  const id: string = await orders.enqueue({ sku: 1 }, { group: 'acme' });
  const ids: string[] = await orders.enqueueMany([{ payload: 1 }, { payload: 2 }]);
  const stats: Stats = await orders.stats();
  const perPartition: number[] = (stats.partitions ?? []).map((p) => p.pending);
  const shares: Array<number | null> = ((await orders.limit({ concurrency: 48 })).partitions ?? []).map((p) => p.concurrency);
  const parts: Queue[] = await orders.partitions();
  const home: Queue = orders.queueFor('acme');
  const found = await (await orders.locate(ids[0])).job(ids[0]);
  const placed: { id: string; queue: string } = await orders.enqueueJob({ sku: 2 }, { children: 1, group: 'acme' });
  await new Queue(cluster, 'invoices').enqueue('child', { parents: [{ queue: 'orders', id: placed.id, group: 'acme' }] });
  const name: string | null = partitionName('orders', route(12, 'acme'), 12);
  const slots: [number, number] | null = share(0, MAX_PARTITIONS);
  const hash: number = fnv1a32(new Uint8Array([1]));
  new Worker(orders, (job: Job) => job.queue); // a partition's name
  try {
    await orders.unspan();
  } catch (e) {
    if (e instanceof EmqSpanError) console.log(e.code);
    if (e instanceof EmqSpannedError) console.log(e.width);
  }
  void [changed, width, known, id, perPartition, shares, parts, home, found, name, slots, hash];
}

export async function waited(): Promise<void> {
  const client = createClient();
  await client.connect();
  const q = new Queue(client, 'emails', { waitReplicas: 1, waitTimeout: 500 });
  try {
    const ids: string[] = await q.enqueueMany([{ payload: 'a' }]);
    void ids;
  } catch (e) {
    if (e instanceof EmqNotReplicatedError) console.log(e.ids, e.replicas, e.wanted, e.enqueued);
  }
  const { value, confirmed } = await q.write('EMQ.PAUSE');
  const wait: { replicas: number; timeout: number } | null = q.wait;
  void [value, confirmed, wait];
}

export async function worker(): Promise<void> {
  const cluster = createCluster({ rootNodes: [{ url: 'redis://127.0.0.1:7001' }] });
  await cluster.connect();
  const q = new Queue(cluster, 'emails');
  const w = new Worker(
    q,
    async (job: Job, { signal }) => {
      if (job.attempt > 3) throw new Retry(30_000, 'later');
      job.progress = { step: 1 };
      signal.addEventListener('abort', () => undefined);
      if (signal.reason instanceof EmqCancelledError || job.cancelled || job.signal.aborted) return { sent: 'nobody' };
      if (signal.reason instanceof EmqTimeoutError || job.timedOut) return { sent: 'late' };
      return { sent: job.data.to as string };
    },
    { concurrency: 8, lease: 30_000, block: 1000, backoff: { type: 'exponential', delay: 1000 }, handleSignals: true },
  );
  w.on('completed', (job, result) => console.log(job.id, result));
  w.on('failed', (job, error) => console.log(job.id, error));
  w.on('error', (error) => {
    if (error instanceof EmqLeaseError || error instanceof EmqError) console.log(error.code);
  });
  w.on('cancelled', (job: Job, error: EmqCancelledError) => console.log(job.id, job.cancelled, error.code));
  const acked: number = w.counts.acked;
  w.on('timeout', (job: Job, error: EmqTimeoutError) => console.log(job.id, job.timedOut, error.code));
  w.once('timeout', (job) => console.log(job.attempt));
  const cancelled: number = w.counts.cancelled;
  const timedOut: number = w.counts.timedOut;
  const kinds: WorkerEvent['kind'][] = ['cancelled', 'timed_out'];
  void [acked, cancelled, timedOut, kinds];
  await w.close(5000);
}
