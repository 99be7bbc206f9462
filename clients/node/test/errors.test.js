// Every EMQ* refusal arrives as its typed class, sharing EmqError; any other error stays the
// client's own (node-redis's ErrorReply).
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { ErrorReply } from 'redis';
import * as echomq from '../src/index.js';
import { Server, until } from './support/server.js';

/** @type {Server} */
let server;
let client;
before(async () => {
  server = await Server.start(['--emq.max-payload-bytes', '64']);
  client = await server.connect();
});
after(() => server.stop());

/** Asserts that `call` rejects with `Class`, an EmqError whose code is `code`. */
async function refuses(call, Class, code) {
  await assert.rejects(call, (e) => {
    assert.ok(e instanceof Class, `${e} is a ${Class.name}`);
    assert.ok(e instanceof echomq.EmqError);
    assert.equal(e.code, code);
    assert.equal(e.name, Class.name);
    assert.ok(e.cause instanceof ErrorReply, 'the client error is its cause');
    return true;
  });
}

test('each EMQ* error prefix is a typed error', async () => {
  const q = new echomq.Queue(client, 'errs');
  await refuses(new echomq.Queue(client, 'a{b').enqueue('x'), echomq.EmqQueueError, 'EMQQUEUE');
  await refuses(q.enqueue('x', { id: 'not-an-id' }), echomq.EmqIdError, 'EMQID');
  await refuses(q.enqueue('x', { id: 'ABC00000000001' }), echomq.EmqKindError, 'EMQKIND');
  await refuses(q.enqueue('x'.repeat(65)), echomq.EmqPayloadError, 'EMQPAYLOAD');
  await refuses(q.call('EMQ.ACK', 'JOB00000000001', 1), echomq.EmqLeaseError, 'EMQLEASE');
  await refuses(q.jobs(/** @type {any} */ ('nope')), echomq.EmqSetError, 'EMQSET');
  await refuses(q.jobs('pending', { cursor: 'nope' }), echomq.EmqCursorError, 'EMQCURSOR');
  await refuses(q.cron('bad', 'x', { spec: '99 * * * *' }), echomq.EmqCronError, 'EMQCRON');
  await refuses(q.call('EMQ.KEY', 'nope'), echomq.EmqTypeError, 'EMQTYPE');
  await refuses(q.send(['EMQ.DECODE', 'not-a-key']), echomq.EmqKeyError, 'EMQKEY');
  await refuses(q.enqueue('x', { parents: [{ queue: 'errs', id: 'JOB00000000001' }] }), echomq.EmqParentError, 'EMQPARENT');
});

test('a renewal, ack, fail or batched ack of an attempt cancelled while it ran is EmqCancelledError', async () => {
  const q = new echomq.Queue(client, 'errs-cancelled');
  const id = await q.enqueue('x');
  const [[claimed, , token]] = await q.call('EMQ.CLAIM', 'COUNT', 1, 'LEASE', 60_000);
  assert.equal(claimed, id);
  assert.equal(await q.cancel(id), true);
  await refuses(q.call('EMQ.RENEW', id, token, 1000), echomq.EmqCancelledError, 'EMQCANCELLED');
  await refuses(q.call('EMQ.ACK', id, token), echomq.EmqCancelledError, 'EMQCANCELLED');
  await refuses(q.call('EMQ.FAIL', id, token, 'ERROR', 'x'), echomq.EmqCancelledError, 'EMQCANCELLED');
  const [place] = await q.call('EMQ.MACK', id, token);
  assert.ok(echomq.translate(place) instanceof echomq.EmqCancelledError, 'in its place of EMQ.MACK');
  // Any other token of the job is stale as before.
  await refuses(q.call('EMQ.ACK', id, token + 1), echomq.EmqLeaseError, 'EMQLEASE');
  assert.ok(!(new echomq.EmqCancelledError('EMQCANCELLED x') instanceof echomq.EmqLeaseError), 'a class of its own');
});

test('an error that is not EchoMQ stays the client error', async () => {
  await server.cmd('SET', 'emq:{wrong}:pending', 'a string');
  const q = new echomq.Queue(client, 'wrong');
  await assert.rejects(q.enqueue('x'), (e) => e instanceof ErrorReply && !(e instanceof echomq.EmqError) && /^WRONGTYPE/.test(e.message));
  await assert.rejects(q.call('EMQ.NOSUCH'), (e) => e instanceof ErrorReply && !(e instanceof echomq.EmqError));
});

test('a server of another protocol major version is refused', () => {
  assert.throws(() => echomq.checkVersion('echomq:3.0.0'), echomq.EmqVersionError);
  assert.doesNotThrow(() => echomq.checkVersion('echomq:2.0.0'));
});

test('an error text is bounded to 4096 bytes, its end kept, on a character boundary', () => {
  const e = new Error('é'.repeat(5000));
  const text = echomq.errorText(e);
  assert.ok(Buffer.byteLength(text) <= echomq.MAX_ERROR);
  assert.ok(!text.includes('\uFFFD'));
  assert.ok(text.endsWith(e.stack.slice(-100)));
});

test('cancelUnstarted leaves a running job to run and removes one that has not started', async () => {
  const q = new echomq.Queue(client, 'unstarted-cancel');
  const running = await q.enqueue('r');
  const waiting = await q.enqueue('w');
  const [[claimed, , token]] = await q.call('EMQ.CLAIM', 'COUNT', 1, 'LEASE', 60_000);
  assert.equal(claimed, running);
  assert.equal(await q.cancelUnstarted(running), 0);
  assert.equal((await q.job(running))?.state, 'active');
  assert.equal(await q.cancelUnstarted(waiting), 1);
  assert.equal(await q.job(waiting), null);
  assert.equal(await q.call('EMQ.ACK', running, token), 1);
});

test('a renewal past the attempt\'s deadline is EmqTimeoutError; its late ack, fail or batched ack is EmqLeaseError', async () => {
  const q = new echomq.Queue(client, 'errs-timeout');
  const id = await q.enqueue('x', { timeout: 200 });
  const [[claimed, , token]] = await q.call('EMQ.CLAIM', 'COUNT', 1, 'LEASE', 60_000);
  assert.equal(claimed, id);
  // Renewed a minute at a time, each renewal ends at the deadline, until one is refused.
  const deadline = (await q.job(id))?.deadline;
  let refusal;
  const refused = await until(async () => {
    try {
      assert.ok((await q.call('EMQ.RENEW', id, token, 60_000)) <= Number(deadline.split(':')[0]), 'never past the deadline');
      return false;
    } catch (e) {
      refusal = e;
      return true;
    }
  });
  assert.ok(refused, 'a renewal was refused');
  assert.ok(refusal instanceof echomq.EmqTimeoutError, `${refusal} is an EmqTimeoutError`);
  await refuses(q.call('EMQ.RENEW', id, token, 1000), echomq.EmqTimeoutError, 'EMQTIMEOUT');
  await refuses(q.call('EMQ.ACK', id, token), echomq.EmqLeaseError, 'EMQLEASE');
  await refuses(q.call('EMQ.FAIL', id, token, 'ERROR', 'x'), echomq.EmqLeaseError, 'EMQLEASE');
  const [place] = await q.call('EMQ.MACK', id, token);
  assert.ok(echomq.translate(place) instanceof echomq.EmqLeaseError, 'in its place of EMQ.MACK');
  assert.ok(!(refusal instanceof echomq.EmqLeaseError) && !(refusal instanceof echomq.EmqCancelledError), 'a class of its own');
});
