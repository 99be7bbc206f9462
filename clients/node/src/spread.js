// A worker's claims on a partitioned queue (docs/cluster.md, "A queue bigger than one
// primary"): the partitions grouped by the primary that holds them, one claim loop a group. A
// loop claims around its group without blocking (on the queue's client, whose connections no
// claim blocks); once a whole round got nothing it blocks on the next partition with `WAKE`
// naming the others, on the worker's claim connection to that primary, so the worker holds at
// most one blocked claim a primary, a partition with a ready job is claimed within a round of
// its group's claims, and no claim waits behind another primary's blocked one. An ack's claim
// (`EMQ.MACK ... CLAIM`, which claims from the partition acked) takes its group's turn only
// when it is that partition's. A partition the slot map moved regroups the loops; a width read
// again (when a blocked claim times out) that changed ends the spread.
import { isCluster, send } from './connection.js';
import { translate } from './errors.js';
import { nowNs } from './hook.js';
import { remap } from './replicas.js';
import { backoff, moved, serverFull, sleep, transient } from './retry.js';
import { queueSlot } from './slot.js';
import { knowWidth } from './span.js';

/** @typedef {import('./queue.js').Queue} Queue */

/** Claims answer payloads as bytes: a payload need not be text. */
const BYTES = { returnBuffers: true };
/** The wait between a new loop's rounds, ms, while a loop of an earlier grouping may still be
 * blocked on its primary (up to `block` ms, once, after a regrouping). */
export const REGROUP_POLL = 100;

/** One primary's partitions, and where its rotation stands. */
class Group {
  /**
   * @param {string} node the primary's id ('' on a single server)
   * @param {Queue[]} queues
   */
  constructor(node, queues) {
    this.node = node;
    this.queues = queues;
    /** The partition whose turn is next. */
    this.next = 0;
    /** Claims in a row that got nothing without blocking: a whole round of them blocks. */
    this.idle = 0;
  }

  /** The partition whose turn it is; the turn passes on. */
  take() {
    const queue = this.queues[this.next];
    this.next = (this.next + 1) % this.queues.length;
    return queue;
  }

  /** Counts a claim that took `n` jobs (`blocked`: one that waited, after which a round starts). */
  claimed(n, blocked) {
    this.idle = n > 0 || blocked ? 0 : this.idle + 1;
  }
}

export class Spread {
  /**
   * @param {import('./worker.js').Worker} worker
   * @param {number} width
   */
  constructor(worker, width) {
    this.worker = worker;
    this.width = width;
    this.queues = worker.queue.partitionQueues(width);
    /** @type {Group[]} */
    this.groups = [];
    /** @type {Map<string, Group>} */
    this.groupOf = new Map();
    /** The grouping the loops now run by: a loop of an earlier one ends after its claim. */
    this.generation = 0;
    /** Set when a claim found the slot map moved a partition: the loops end and regroup. */
    this.regrouping = false;
    /** Tells `run` to regroup. @type {() => void} */
    this.regroupNow = () => {};
    /** The width read again, when it is not this one. @type {number | undefined} */
    this.changed = undefined;
    /** A loop's fatal error, which ends the others. @type {unknown} */
    this.fatal = undefined;
    /** Regroupings since a blocking claim was last answered: each waits a backoff first. */
    this.regroups = 0;
    /** Whether the partitions' outboxes are swept (from the first claim that went through). */
    this.swept = false;
    /** The width's read in flight after an idle claim, which every loop waits on. @type {Promise<boolean> | null} */
    this.reading = null;
  }

  /** Claims until the worker closes or the queue's width changes; the width then. A regrouping
   * starts the new loops at once: they claim in rounds without blocking (`REGROUP_POLL` ms
   * apart) until every earlier loop has ended (each after the claim it is in, a blocked one up
   * to `block` ms), so a primary never holds two of the worker's blocked claims. */
  async run() {
    /** @type {Promise<unknown>} */
    let earlier = Promise.resolve();
    while (!this.worker.closing && this.changed === undefined && this.fatal === undefined) {
      if (this.regroups > 0) await this.pause(backoff(this.regroups - 1));
      this.regrouping = false;
      const generation = ++this.generation;
      this.group();
      const before = earlier;
      const loops = Promise.all(this.groups.map((g) => this.loop(g, generation, before)));
      earlier = Promise.all([before, loops]);
      await Promise.race([loops, new Promise((resolve) => (this.regroupNow = () => resolve(undefined)))]);
    }
    await earlier;
    if (this.fatal !== undefined) throw this.fatal;
    return this.changed ?? this.width;
  }

  /** Whether a loop of `generation` claims on. */
  live(generation) {
    const w = this.worker;
    return !w.closing && generation === this.generation && !this.regrouping && this.changed === undefined && this.fatal === undefined;
  }

  /** Groups the partitions by the primary the claim connection's slot map has for each. */
  group() {
    /** @type {Map<string, Queue[]>} */
    const byNode = new Map();
    for (const queue of this.queues) {
      const node = this.nodeOf(queue.name);
      (byNode.get(node) ?? /** @type {Queue[]} */ (byNode.set(node, []).get(node))).push(queue);
    }
    this.groups = [...byNode].map(([node, queues]) => new Group(node, queues));
    this.groupOf = new Map(this.groups.flatMap((g) => g.queues.map((q) => /** @type {[string, Group]} */ ([q.name, g]))));
  }

  /** The id of the primary that holds `queue` as the queue's client's slot map has it (which
   * its calls keep up to date), '' on a single server, '?' for a slot the map does not cover. */
  nodeOf(queue) {
    const client = this.worker.queue.client;
    if (!isCluster(client)) return '';
    try {
      return String(client.getSlotMaster(queueSlot(queue))?.id ?? '?');
    } catch {
      return '?';
    }
  }

  /**
   * A claim of `queue`: without blocking on the queue's client (routed, redirections
   * followed); a blocking one on the claim connection's socket to the group's primary, where a
   * redirection comes back as an error (a cluster client would follow it to another primary's
   * socket, and wait there behind that primary's blocked claim).
   * @param {Group} group
   * @param {Queue} queue
   * @param {string[]} args
   * @param {boolean} block
   */
  claim(group, queue, args, block) {
    const w = this.worker;
    if (!block) return send(w.queue.client, queue.name, args, false, BYTES);
    const node = isCluster(w.claims) ? w.claims.getMasters().find((/** @type {any} */ m) => m.id === group.node) : undefined;
    return node ? node.client.sendCommand(args, BYTES) : w.claimOn(queue.name, args);
  }

  /** Whether every partition of `group` is still on its primary, as the slot map has it now. */
  placed(group) {
    return group.queues.every((q) => this.nodeOf(q.name) === group.node);
  }

  /** Ends the loops, to group the partitions again. */
  regroup() {
    if (!this.regrouping) this.regroups++;
    this.regrouping = true;
    this.worker.wake();
    this.regroupNow();
  }

  /**
   * @param {Group} group
   * @param {number} generation
   * @param {Promise<unknown>} earlier the loops of the earlier groupings, which may still block
   */
  async loop(group, generation, earlier) {
    const w = this.worker;
    let failures = 0;
    let alone = false;
    void earlier.then(() => (alone = true));
    try {
      while (this.live(generation)) {
        const free = w.free();
        if (free <= 0) {
          await w.room();
          continue;
        }
        const block = group.idle >= group.queues.length;
        if (block ? !this.placed(group) : this.nodeOf(group.queues[group.next].name) !== group.node) return this.regroup();
        if (block && !alone) {
          // No second blocked claim on a primary: rounds without blocking until they have ended.
          await Promise.race([earlier, this.pause(REGROUP_POLL)]);
          group.idle = 0;
          continue;
        }
        const queue = group.take();
        // A blocked claim holds its slots up to `block` ms: it takes its group's share of them,
        // so the other primaries' claims have room meanwhile; any claim takes at most the
        // group's share of the concurrency, so a primary that stops answering under one (node-redis
        // has no command timeout) keeps no more than that from the others.
        const share = Math.max(1, Math.floor(w.concurrency / this.groups.length));
        const count = Math.min(block ? Math.max(1, Math.floor(free / this.groups.length)) : free, share, w.batch);
        const args = ['EMQ.CLAIM', queue.name, 'COUNT', String(count), 'LEASE', String(w.lease)];
        if (block) {
          args.push('BLOCK', String(w.block));
          const others = group.queues.filter((q) => q !== queue);
          if (others.length > 0) args.push('WAKE', String(others.length), ...others.map((q) => q.name));
        }
        w.claimReserved += count;
        const sentAt = Date.now();
        const sentNs = w.hook ? nowNs() : 0n;
        let reply;
        try {
          reply = await this.claim(group, queue, args, block);
          failures = 0;
        } catch (e) {
          w.claimReserved -= count;
          w.wake();
          // Closed while the claim waited for a primary that did not answer: dropped with it.
          if (w.closed) return;
          // A partition, or one a claim's WAKE named, is on another primary now: the queue's
          // client reads the slot map again, and the loops regroup by it. (`ASK`, a slot on its
          // way, is waited out as `TRYAGAIN` is.)
          if (e instanceof Error && e.message.startsWith('MOVED ')) {
            await Promise.all(group.queues.map((q) => remap(w.queue.client, q.name)));
            return this.regroup();
          }
          if (moved(e)) {
            await this.pause(backoff(failures++));
            continue;
          }
          if (!transient(e) && !serverFull(e)) throw translate(e);
          await this.pause(backoff(failures++));
          continue;
        }
        w.claimReserved -= count;
        this.answered(block);
        if (!this.swept) w.sweepOn(this.queues);
        this.swept = true;
        const jobs = reply ?? [];
        group.claimed(jobs.length, block);
        for (const raw of jobs) w.start(raw, sentAt, sentNs, queue);
        if (jobs.length < count) w.wake(); // the slots it did not fill, to the other loops
        if (reply === null) await this.reread();
        // The other loops woken meanwhile claim first: a loop that keeps finding work must not
        // keep the free slots from them.
        await new Promise((resolve) => setImmediate(resolve));
      }
    } catch (e) {
      this.fatal ??= e;
      w.wake();
    }
  }

  /** Counts a claim answered. Only a blocking one (jobs, none, or its time run out) shows the
   * grouping sound and starts the regroupings' backoff again: the first claims after a
   * regrouping do not block, and go through even while the blocking claim's `WAKE` is still
   * refused (`MOVED`), which would otherwise regroup again and again with no backoff.
   * @param {boolean} block */
  answered(block) {
    if (block) this.regroups = 0;
  }

  /** Waits `ms`, or less once the worker closes: not less when another loop wakes the worker
   * (as each does when it frees slots), so the loops' backoffs stay theirs. */
  async pause(ms) {
    await sleep(ms, this.worker.closingSignal());
  }

  /** Reads the queue's width again (a blocked claim timed out: the queue was idle that long);
   * another ends the spread. Read as the queue's calls read it (`knowWidth`): for a user the
   * server will not tell, the width known, so the spread goes on. */
  async reread() {
    const queue = this.worker.queue;
    let width;
    try {
      // Waited for a claim's time at most: node-redis has no timeout of its own, and the
      // queue's own primary cut off must not hold up the loops of the others.
      // One read in flight for every loop: a primary that does not answer gets no pile of them.
      this.reading ??= knowWidth(queue)
        .then(() => true)
        .finally(() => {
          this.reading = null;
        });
      const read = this.reading;
      read.catch(() => {});
      if (!(await Promise.race([read, sleep(this.worker.block, this.worker.closingSignal()).then(() => false)]))) return;
      width = queue.knownWidth ?? 0;
    } catch (e) {
      if (!transient(e)) this.worker.report(e);
      return;
    }
    if (width !== this.width && this.changed === undefined) {
      this.changed = width;
      this.worker.wake();
    }
  }

  /** Whether an ack's claim on partition `queue` may take its group's turn (it then passes
   * the turn on, as the loop's claim there would have). */
  turn(queue) {
    const group = this.groupOf.get(queue);
    if (!group || group.queues[group.next].name !== queue) return false;
    group.take();
    return true;
  }

  /** Counts an ack's claim on partition `queue` that took `n` jobs. */
  claimed(queue, n) {
    this.groupOf.get(queue)?.claimed(n, false);
  }
}
