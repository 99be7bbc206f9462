#!/usr/bin/env node
// echomq-worker: runs a worker whose handler is a module's default export (or module.exports),
// like the Python package's `echomq worker`; SIGTERM and SIGINT close it gracefully.
//   echomq-worker ./handler.js --url redis://127.0.0.1:6379 --queue emails --concurrency 8
import { resolve } from 'node:path';
import { pathToFileURL } from 'node:url';
import { parseArgs } from 'node:util';
import { createClient, createCluster } from 'redis';
import { Queue, Worker } from '../src/index.js';

const USAGE = `usage: echomq-worker <handler.js> --queue <q> [--url redis://127.0.0.1:6379 | --cluster <url of any node>]
       [--concurrency 4] [--lease 30000] [--batch <n>] [--shutdown-timeout 30000]   (times in ms)`;

function options() {
  try {
    const { values, positionals } = parseArgs({
      allowPositionals: true,
      options: {
        url: { type: 'string', default: 'redis://127.0.0.1:6379' },
        cluster: { type: 'string' },
        queue: { type: 'string' },
        concurrency: { type: 'string', default: '4' },
        lease: { type: 'string', default: '30000' },
        batch: { type: 'string' },
        'shutdown-timeout': { type: 'string', default: '30000' },
        help: { type: 'boolean', short: 'h' },
      },
    });
    if (values.help || positionals.length !== 1 || !values.queue) throw new Error(USAGE);
    return { values, handler: positionals[0] };
  } catch (e) {
    console.error(e instanceof Error ? e.message : e);
    process.exit(2);
  }
}

/** The handler: the module's default export (an ES module's, or a CommonJS `module.exports`). */
async function load(path) {
  const mod = await import(pathToFileURL(resolve(path)).href);
  const handler = typeof mod.default === 'function' ? mod.default : mod.default?.default;
  if (typeof handler !== 'function') {
    console.error(`echomq-worker: ${path} exports no function (export default, or module.exports)`);
    process.exit(2);
  }
  return handler;
}

const { values, handler: path } = options();
const handler = await load(path);
const client = values.cluster ? createCluster({ rootNodes: [{ url: values.cluster }] }) : createClient({ url: values.url });
client.on('error', (e) => console.error('echomq-worker:', e.message));
await client.connect();
const worker = new Worker(new Queue(client, String(values.queue)), handler, {
  concurrency: Number(values.concurrency),
  lease: Number(values.lease),
  batch: values.batch === undefined ? undefined : Number(values.batch),
  shutdownTimeout: Number(values['shutdown-timeout']),
  handleSignals: true,
  autorun: false,
});
worker.on('error', (e) => console.error('echomq-worker:', e instanceof Error ? e.message : e));
let code = 0;
try {
  await worker.run();
} catch {
  code = 1;
}
console.log(JSON.stringify(worker.counts));
await client.quit();
process.exit(code);
