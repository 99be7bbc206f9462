// Headers and trace context (docs/observability.md), against a real server: a job's headers
// reach each of its attempts and `job()`; a queue's `inject` hook writes the trace context and
// the caller's headers win; a worker's `around` hook wraps every attempt, through a retry; and a
// `traceparent` a Node producer's hook wrote becomes the trace of a Python worker's span
// (OpenTelemetry's SDK, its in-memory exporter).
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { after, before, test } from 'node:test';
import { Queue, Retry, Worker, formatTraceparent, parseTraceparent } from '../src/index.js';
import { ROOT, Server, until } from './support/server.js';

const PYTHON = process.env.ECHOMQ_PYTHON ?? join(ROOT, 'target/py/bin/python');
const run = promisify(execFile);

/** A Python worker tracing into OpenTelemetry's in-memory exporter: acks one job of `queue`,
 * then prints its consumer span's trace id, parent span id, links and attributes as JSON. */
const PY_TRACED_WORKER = `
import json, sys, threading, time, redis, echomq
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
port, queue = int(sys.argv[1]), sys.argv[2]
exporter = InMemorySpanExporter()
provider = TracerProvider()
provider.add_span_processor(SimpleSpanProcessor(exporter))
w = echomq.Worker(redis.Redis(port=port), queue, lambda job: None, tracer_provider=provider)
t = threading.Thread(target=w.run, daemon=True)
t.start()
while w.counts["acked"] < 1:
    time.sleep(0.01)
w.stop(); t.join(10)
[span] = exporter.get_finished_spans()
print(json.dumps({
    "trace": f"{span.context.trace_id:032x}",
    "parent": f"{span.parent.span_id:016x}" if span.parent else None,
    "links": [f"{l.context.span_id:016x}" for l in span.links],
    "attributes": dict(span.attributes),
}))
`;

/** @type {Server} */
let server;
let client;
before(async () => {
  server = await Server.start(['--emq.backoff-base-ms', '100']);
  client = await server.connect();
});
after(() => server.stop());

/** A trace context as an OpenTelemetry SDK would mint it. */
function minted() {
  return { traceId: randomBytes(16).toString('hex'), spanId: randomBytes(8).toString('hex'), sampled: true };
}

test('a traceparent reads back as written, and one not well formed reads as none', () => {
  const context = minted();
  const value = formatTraceparent(context);
  assert.match(value, /^00-[0-9a-f]{32}-[0-9a-f]{16}-01$/);
  assert.deepEqual(parseTraceparent(value), context);
  assert.equal(parseTraceparent(formatTraceparent({ ...context, sampled: false }))?.sampled, false);
  for (const bad of [undefined, '', 'x', `ff-${context.traceId}-${context.spanId}-01`, `00-${'0'.repeat(32)}-${context.spanId}-01`, `00-${context.traceId}-${'0'.repeat(16)}-01`]) {
    assert.equal(parseTraceparent(bad), null, String(bad));
  }
  assert.throws(() => formatTraceparent({ traceId: 'short', spanId: context.spanId }), RangeError);
});

test("a header named like an object's own property is read as a header", async () => {
  const q = new Queue(client, 'odd-keys');
  const id = await q.enqueue('work', { headers: { ['__proto__']: 'p', constructor: 'c' } });
  const { headers } = await q.job(id);
  assert.deepEqual(Object.entries(headers).sort(), [['__proto__', 'p'], ['constructor', 'c']]);
  assert.equal(Object.getPrototypeOf(headers), Object.prototype);
});

test('headers reach every attempt through a retry, inside the around hook', async () => {
  const context = minted();
  const q = new Queue(client, 'headed', { inject: (carrier) => void (carrier.traceparent = formatTraceparent(context)) });
  const id = await q.enqueue('work', { headers: { tenant: 'acme' } });
  const row = await q.job(id);
  assert.deepEqual(row.headers, { traceparent: formatTraceparent(context), tenant: 'acme' });
  const seen = [];
  const wrapped = [];
  const worker = new Worker(q, (job) => {
    seen.push({ attempt: job.attempt, tenant: job.headers.tenant, trace: job.trace });
    if (job.attempt === 1) throw new Retry(10, 'once more');
    return 'ok';
  }, {
    around: async (job, run) => {
      wrapped.push(job.attempt);
      return run();
    },
  });
  assert.ok(await until(() => worker.counts.acked === 1, 30_000));
  await worker.close();
  assert.deepEqual(wrapped, [1, 2]);
  assert.deepEqual(seen, [1, 2].map((attempt) => ({ attempt, tenant: 'acme', trace: context })));
  assert.equal((await q.job(id)).result, 'ok', 'what run() returned is the result');
});

test("the caller's headers win over the hook's, and a batch carries them per job", async () => {
  const q = new Queue(client, 'headed-batch', { inject: (carrier) => void Object.assign(carrier, { traceparent: formatTraceparent(minted()), tenant: 'hook' }) });
  const id = await q.enqueue('one', { headers: { tenant: 'caller' } });
  assert.equal((await q.job(id)).headers.tenant, 'caller');
  const [a, b] = await q.enqueueMany([{ payload: 'a', headers: { k: 'first' } }, { payload: 'b' }]);
  const [rowA, rowB] = [await q.job(a), await q.job(b)];
  assert.deepEqual([rowA.headers.k, rowA.headers.tenant, rowB.headers.k, rowB.headers.tenant], ['first', 'hook', undefined, 'hook']);
  assert.equal(rowA.headers.traceparent, rowB.headers.traceparent, 'one context for the call');
  const plain = new Queue(client, 'headed-batch');
  const bare = await plain.enqueue('bare');
  assert.equal((await plain.job(bare)).headers, undefined, 'no hook, no headers');
});

const python = existsSync(PYTHON) ? false : `no Python with echomq at ${PYTHON} (set ECHOMQ_PYTHON)`;

test("a Node producer's traceparent is the trace of a Python worker's span", { skip: python }, async () => {
  const context = minted();
  const q = new Queue(client, 'node-traced', { inject: (carrier) => void (carrier.traceparent = formatTraceparent(context)) });
  const id = await q.enqueue({ album: 7 });
  const { stdout } = await run(PYTHON, ['-c', PY_TRACED_WORKER, String(server.port), q.name], { timeout: 60_000 });
  const span = JSON.parse(stdout);
  assert.equal(span.trace, context.traceId);
  assert.equal(span.parent, context.spanId);
  assert.deepEqual(span.links, [context.spanId]);
  assert.equal(span.attributes['messaging.system'], 'echomq');
  assert.equal(span.attributes['messaging.destination.name'], 'node-traced');
  assert.equal(span.attributes['messaging.message.id'], id);
  assert.equal(span.attributes['echomq.job.outcome'], 'acked');
});
