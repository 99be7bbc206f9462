// The client's hash slots (slot.js) against docs/protocol.md §3's vectors and the module's own
// EMQ.SLOT, hash tags included: a flow's EMQ.ADOPT goes where the slots differ.
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { crc16, queueSlot, slot } from '../src/index.js';
import { Server } from './support/server.js';

/** @type {Server} */
let server;
before(async () => {
  server = await Server.start();
});
after(() => server.stop());

test('protocol.md §3 vectors', () => {
  assert.equal(crc16(Buffer.from('123456789')), 0x31c3);
  assert.deepEqual(['123456789', 'orders', 'fills', 'quotes'].map(slot), [12739, 105, 4165, 3378]);
  assert.deepEqual(['orders', 'fills', 'quotes'].map(queueSlot), [105, 4165, 3378]);
});

test('slot() is the module EMQ.SLOT, hash tags and bytes beyond ASCII included', async () => {
  const keys = ['emq:{orders}:pending', 'a{}b', '{}{x}', 'x{y}z{w}', '{', 'pré{fix}', 'naïve', 'emq:{q:1}:job:JOB00000000001'];
  for (let n = 0; n < 50; n++) keys.push(`queue-${n * 7919}`);
  for (const key of keys) assert.equal(slot(key), Number(await server.cmd('EMQ.SLOT', key)), key);
});
