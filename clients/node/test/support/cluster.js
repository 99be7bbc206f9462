// A real 3-primary cluster for the tests: valkey-server nodes with the module and
// `--cluster-enabled yes`, slots assigned with CLUSTER ADDSLOTSRANGE, joined with CLUSTER MEET,
// waited for until every node says cluster_state:ok (as tests/support/cluster.rs, without
// valkey-cli); `addReplica` gives a primary a replica.
import { createCluster } from 'redis';
import { Server, freePort, until } from './server.js';

const SLOTS = 16384;

export class Cluster {
  static async start(primaries = 3) {
    const nodes = [];
    const busPorts = [];
    for (let i = 0; i < primaries; i++) {
      busPorts.push(await freePort());
      nodes.push(
        await Server.start([
          '--cluster-enabled', 'yes',
          '--cluster-config-file', 'nodes.conf',
          '--cluster-port', String(busPorts[i]),
          '--cluster-node-timeout', '2000',
        ]),
      );
    }
    const cluster = new Cluster(nodes, busPorts);
    for (let i = 0; i < primaries; i++) {
      const first = Math.floor((SLOTS * i) / primaries);
      const last = Math.floor((SLOTS * (i + 1)) / primaries) - 1;
      await nodes[i].cmd('CLUSTER', 'ADDSLOTSRANGE', first, last);
    }
    for (let i = 1; i < primaries; i++) await nodes[0].cmd('CLUSTER', 'MEET', '127.0.0.1', nodes[i].port, busPorts[i]);
    const ok = await until(async () => {
      for (const node of nodes) {
        const info = String(await node.cmd('CLUSTER', 'INFO'));
        if (!info.includes('cluster_state:ok') || !info.includes(`cluster_known_nodes:${primaries}`)) return false;
      }
      return true;
    }, 30_000);
    if (!ok) {
      await cluster.stop();
      throw new Error('the cluster did not become healthy');
    }
    return cluster;
  }

  constructor(nodes, busPorts) {
    this.nodes = nodes;
    this.busPorts = busPorts;
  }

  /** A connected cluster client, closed by `stop`; `options` for `createCluster` (`useReplicas`). */
  async connect(options = {}) {
    const c = createCluster({ rootNodes: this.nodes.map((n) => ({ url: n.url })), ...options });
    await c.connect();
    (this.clients ??= []).push(c);
    return c;
  }

  /** Starts a replica of `primary` (one of `nodes`), joined to the cluster; resolves once the
   * primary counts it. Stopped by `stop`. */
  async addReplica(primary) {
    const bus = await freePort();
    const node = await Server.start([
      '--cluster-enabled', 'yes',
      '--cluster-config-file', 'nodes.conf',
      '--cluster-port', String(bus),
      '--cluster-node-timeout', '2000',
    ]);
    (this.replicas ??= []).push(node);
    await node.cmd('CLUSTER', 'MEET', '127.0.0.1', primary.port, this.busPorts[this.nodes.indexOf(primary)]);
    const id = String(await primary.cmd('CLUSTER', 'MYID'));
    const known = await until(async () => String(await node.cmd('CLUSTER', 'NODES')).includes(id), 30_000);
    if (known) await node.cmd('CLUSTER', 'REPLICATE', id);
    // Online: synced, so a WAIT there counts it (a replica still loading its copy acks nothing).
    const linked = known && (await until(async () => /slave0:.*state=online/.test(String(await primary.cmd('INFO', 'replication'))), 30_000));
    if (!linked) throw new Error('the replica did not attach');
    return node;
  }

  /** Moves `slot` from the primary `from` to the primary `to` (two of `nodes`) as an operator
   * would: `IMPORTING` on `to`, `MIGRATING` on `from`, its keys over with `MIGRATE`, then `NODE`
   * on every primary; how many keys moved. */
  async moveSlot(slot, from, to) {
    const [fromId, toId] = [String(await from.cmd('CLUSTER', 'MYID')), String(await to.cmd('CLUSTER', 'MYID'))];
    await to.cmd('CLUSTER', 'SETSLOT', slot, 'IMPORTING', fromId);
    await from.cmd('CLUSTER', 'SETSLOT', slot, 'MIGRATING', toId);
    let moved = 0;
    for (;;) {
      const keys = /** @type {string[]} */ (await from.cmd('CLUSTER', 'GETKEYSINSLOT', slot, 50));
      if (keys.length === 0) break;
      await from.cmd('MIGRATE', '127.0.0.1', to.port, '', 0, 5000, 'KEYS', ...keys);
      moved += keys.length;
    }
    for (const node of this.nodes) await node.cmd('CLUSTER', 'SETSLOT', slot, 'NODE', toId);
    return moved;
  }

  /** The node whose slots hold `queue`'s keys. */
  async owner(queue) {
    const slot = Number(await this.nodes[0].cmd('CLUSTER', 'KEYSLOT', `emq:{${queue}}:pending`));
    return this.nodes.find((_, i) => slot >= Math.floor((SLOTS * i) / this.nodes.length) && slot < Math.floor((SLOTS * (i + 1)) / this.nodes.length));
  }

  async stop() {
    for (const c of this.clients ?? []) await c.disconnect().catch(() => {});
    for (const n of [...(this.replicas ?? []), ...this.nodes]) await n.stop();
  }
}
