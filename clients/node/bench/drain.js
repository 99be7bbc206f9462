#!/usr/bin/env node
// drain <port> <queue> <jobs> [concurrency]: one Worker of the package drains `jobs` no-op jobs
// of `queue` on 127.0.0.1:<port>, then prints its jobs/s, timed from its start to its last job
// done (`make bench-clients` runs it beside the Rust crate's drain example).
import { createClient } from 'redis';
import { Queue, Worker } from '../src/index.js';

const [port, queue, jobs, concurrency = '64'] = process.argv.slice(2);
if (!port || !queue || !jobs) {
  console.error('usage: drain <port> <queue> <jobs> [concurrency]');
  process.exit(2);
}
const total = Number(jobs);
const client = createClient({ url: `redis://127.0.0.1:${port}` });
await client.connect();
let done = 0;
let finished;
const all = new Promise((resolve) => (finished = resolve));
const started = process.hrtime.bigint();
const worker = new Worker(new Queue(client, queue), () => {
  if (++done >= total) finished(process.hrtime.bigint());
}, { concurrency: Number(concurrency) });
worker.on('error', (e) => console.error(e));
const end = await all;
// The last handler returned; its acknowledgement goes out with the close that follows.
console.log((total / (Number(end - started) / 1e9)).toFixed(0));
await worker.close();
await client.quit();
