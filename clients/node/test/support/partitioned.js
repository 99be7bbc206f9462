// What the partitioned queues' test files share: a set's ids, a worker run until it has acked
// so many jobs, and a command's counts on a server.
import { Worker } from '../../src/index.js';
import { until } from './server.js';

export /** Every id in a set of `queue` (every page of `EMQ.JOBS`). */
async function idsIn(queue, set = 'pending') {
  const ids = new Set();
  let cursor = '0';
  do {
    const page = await queue.jobs(set, { cursor, count: 500 });
    for (const job of page.jobs) ids.add(String(job.id));
    cursor = page.cursor;
  } while (cursor !== '0');
  return ids;
}

export /**
 * Runs a Worker on `queue` until it has acked `total` jobs; how often each job ran, the queue
 * each handle carried, and the most handlers that ran at once.
 * @param {Queue} queue
 * @param {number} total
 * @param {object} [options] the Worker's
 * @param {(job: any) => unknown} [handler] what each job does first
 */
async function drain(queue, total, options = {}, handler = () => {}) {
  /** @type {Map<string, number>} */
  const runs = new Map();
  /** @type {Map<string, string>} */
  const queues = new Map();
  const errors = [];
  let active = 0;
  let most = 0;
  const worker = new Worker(
    queue,
    async (job) => {
      runs.set(job.id, (runs.get(job.id) ?? 0) + 1);
      queues.set(job.id, job.queue);
      most = Math.max(most, ++active);
      try {
        return await handler(job);
      } finally {
        active--;
      }
    },
    { concurrency: 8, ...options },
  );
  worker.on('error', (e) => errors.push(e));
  const done = await until(() => worker.counts.acked >= total, 60_000);
  return { worker, runs, queues, errors, done, most: () => most };
}

export /** How often `server` ran `command` since its last `CONFIG RESETSTAT`, and how many of those
 * answered an error (`INFO commandstats`). */
async function commandStats(server, command) {
  const line = String(await server.cmd('INFO', 'commandstats')).split('\n').find((l) => l.startsWith(`cmdstat_${command.toLowerCase()}:`));
  const field = (name) => Number(new RegExp(`${name}=(\\d+)`).exec(line ?? '')?.[1] ?? 0);
  return { calls: field('calls'), failed: field('failed_calls') };
}

export /** How often `server` refused `command` before running it (`rejected_calls`: `MASTERDOWN`,
 * `CLUSTERDOWN`, a redirection) since its last `CONFIG RESETSTAT`. */
async function rejectedCalls(server, command) {
  const line = String(await server.cmd('INFO', 'commandstats')).split('\n').find((l) => l.startsWith(`cmdstat_${command.toLowerCase()}:`));
  return Number(/rejected_calls=(\d+)/.exec(line ?? '')?.[1] ?? 0);
}

export /**
 * The `EMQ.CLAIM`s `server`'s slow log holds (`slowlog-log-slower-than 0` logs each command
 * with its arguments), each as its `COUNT` and whether it blocked.
 * @param {import('./server.js').Server} server
 */
async function claimsLogged(server) {
  const entries = /** @type {any[]} */ (await server.cmd('SLOWLOG', 'GET', '-1'));
  return entries
    .map((e) => e[3].map(String))
    .filter((args) => args[0].toUpperCase() === 'EMQ.CLAIM')
    .map((args) => ({ count: Number(args[args.indexOf('COUNT') + 1]), blocking: args.includes('BLOCK') }));
}
