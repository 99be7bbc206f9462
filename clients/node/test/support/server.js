// Real servers for the tests: a valkey-server with the module on a free loopback port, in a
// directory of its own, killed after the test. ECHOMQ_MODULE and VALKEY_SERVER as the other
// suites take them.
import { spawn } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { createClient } from 'redis';

export const ROOT = resolve(dirname(fileURLToPath(import.meta.url)), '../../../..');
export const MODULE = process.env.ECHOMQ_MODULE ?? join(ROOT, 'target/release/libechomq.so');
export const BINARY = process.env.VALKEY_SERVER ?? 'valkey-server';

/** A port free on loopback now. */
export function freePort() {
  return new Promise((done, fail) => {
    const s = createServer();
    s.once('error', fail);
    s.listen(0, '127.0.0.1', () => {
      const { port } = /** @type {import('node:net').AddressInfo} */ (s.address());
      s.close(() => done(port));
    });
  });
}

/** Waits (up to `timeout` ms) until `f()` is truthy; whether it became so. */
export async function until(f, timeout = 10_000) {
  const deadline = Date.now() + timeout;
  while (Date.now() < deadline) {
    if (await f()) return true;
    await new Promise((r) => setTimeout(r, 20));
  }
  return false;
}

export class Server {
  /** Starts one server; `extra` are more `--name value` arguments. */
  static async start(extra = []) {
    // Not the port `extra` gives the cluster bus, which `freePort` may hand out again.
    const at = extra.indexOf('--cluster-port');
    const bus = at >= 0 ? extra[at + 1] : undefined;
    let port = await freePort();
    while (String(port) === bus) port = await freePort();
    const server = new Server(port, extra);
    await server.ready();
    return server;
  }

  constructor(port, extra) {
    this.port = port;
    this.url = `redis://127.0.0.1:${port}`;
    this.dir = mkdtempSync(join(tmpdir(), 'echomq-node-'));
    this.process = spawn(
      BINARY,
      ['--port', String(port), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no', '--dir', this.dir, '--loadmodule', MODULE, ...extra],
      { stdio: 'ignore' },
    );
    this.exited = new Promise((r) => this.process.once('exit', r));
  }

  async ready() {
    const ok = await until(async () => {
      const c = this.client();
      c.on('error', () => {});
      try {
        await c.connect();
        await c.ping();
        return true;
      } catch {
        return false;
      } finally {
        if (c.isOpen) await c.disconnect();
      }
    });
    if (!ok) throw new Error(`valkey-server did not start on ${this.port}`);
  }

  /** A client of this server, not yet connected. */
  client() {
    return createClient({ url: this.url });
  }

  /** A connected client, closed by `stop`. */
  async connect() {
    const c = this.client();
    await c.connect();
    (this.clients ??= []).push(c);
    return c;
  }

  /** One command on a connection of its own. */
  async cmd(...args) {
    const c = this.client();
    await c.connect();
    try {
      return await c.sendCommand(args.map(String));
    } finally {
      await c.disconnect();
    }
  }

  async stop() {
    for (const c of this.clients ?? []) if (c.isOpen) await c.disconnect().catch(() => {});
    this.process.kill('SIGKILL');
    await this.exited;
    rmSync(this.dir, { recursive: true, force: true });
  }
}
