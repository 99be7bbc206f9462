// The chaos harness's Node worker: the shipped `Worker` with its defaults (blocking claims,
// renewals, `EMQ.MACK` settles) and `waitReplicas: 1`, on node-redis's cluster client as the
// queue's worker ACL user, writing each `onEvent` call to stdout as one JSON line for the
// harness's history. The handler holds a job up to 60 ms and fails one in ten (`Retry`, 100 ms),
// drawn from `--seed`. node-redis is resolved from the client's folder (`make node-deps`).
//   node_worker.js --queue Q --user U --password P --nodes ip:port,... --seed S --name N --lease MS
import { createRequire } from 'node:module';
import { parseArgs } from 'node:util';
import { Queue, Retry, Worker } from '../../clients/node/src/index.js';

const require = createRequire(new URL('../../clients/node/package.json', import.meta.url));
const { createCluster } = require('redis');

const flags = ['queue', 'user', 'password', 'nodes', 'seed', 'name', 'lease'];
const { values: a } = parseArgs({ options: Object.fromEntries(flags.map((f) => [f, { type: 'string' }])) });
for (const f of flags) if (a[f] === undefined) throw new Error(`--${f} is needed`);

/** mulberry32: the handler's draws, from the seed. */
let state = Number(BigInt(a.seed) & 0xffffffffn);
function random() {
  state = (state + 0x6d2b79f5) | 0;
  let t = Math.imul(state ^ (state >>> 15), 1 | state);
  t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
  return ((t ^ (t >>> 14)) >>> 0) / 2 ** 32;
}

// The harness gone (its end of the pipe closed): so is the worker.
process.stdout.on('error', () => process.exit(0));

/** One event as the history's JSON line (the times as integers: they pass 2^53). The Node
 * client names a partition's job's event by its partition; the history, as the Python and Rust
 * clients do, by the worker's queue. */
function onEvent(e) {
  const queue = e.queue.startsWith(`${a.queue}~`) ? a.queue : e.queue;
  const fields = {
    kind: e.kind, worker: e.worker, queue, id: e.id, token: e.token,
    sent_ns: '@SENT', answered_ns: '@ANSWERED',
    outcome: e.outcome, error: e.error, action: e.action, replicated: e.replicated,
  };
  const line = JSON.stringify(fields).replace('"@SENT"', String(e.sentNs)).replace('"@ANSWERED"', String(e.answeredNs));
  process.stdout.write(`${line}\n`);
}

const client = createCluster({
  rootNodes: a.nodes.split(',').map((n) => ({ url: `redis://${n}` })),
  // A connection to a node cut off is given up on in a second (node-redis 4 has no timeout for
  // a command once sent: a node cut off under one holds it until the link is back).
  defaults: { username: a.user, password: a.password, socket: { connectTimeout: 1000 } },
});
client.on('error', (e) => console.error('node worker: client:', e instanceof Error ? e.message : e));
await client.connect();

async function handle() {
  const hold = random() * 60;
  const fail = Math.floor(random() * 10) === 0;
  await new Promise((resolve) => setTimeout(resolve, hold));
  if (fail) throw new Retry(100, 'one in ten fails');
}

const worker = new Worker(new Queue(client, a.queue), handle, {
  lease: Number(a.lease),
  shutdownTimeout: 5000,
  name: a.name,
  onEvent,
  waitReplicas: 1,
  handleSignals: true,
  autorun: false,
});
// node-redis's error replies have no stack: the message, then the stack where there is one.
worker.on('error', (e) => console.error('node worker:', e instanceof Error ? `${e.name}: ${e.message} ${e.stack ?? ''}` : e));
let code = 0;
try {
  await worker.run();
} catch {
  code = 1;
}
await client.disconnect().catch(() => {});
// Once the lines written so far are out: an exit drops what the pipe has not taken yet.
process.stdout.write('', () => process.exit(code));
