// The client names and routes a partitioned queue's partitions as the module does: every line
// of testing/vectors/partitions.tsv (queue, width, id or group, partition, name, slot) and of
// shares.tsv (width, index, first slot, the slot past the last).
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { test } from 'node:test';
import { MAX_NAME_LEN, partitionName, route, share, slot } from '../src/index.js';

/** The lines of testing/vectors/`file`, split at tabs, comments left out.
 * @param {string} file */
function vectors(file) {
  return readFileSync(new URL(`../../../testing/vectors/${file}`, import.meta.url), 'utf8')
    .split('\n')
    .filter((line) => line && !line.startsWith('#'))
    .map((line) => line.split('\t'));
}

test('every vector routes and names as the module does', () => {
  const lines = vectors('partitions.tsv');
  assert.equal(lines.length, 108);
  for (const [queue, width, key, index, name, at] of lines) {
    assert.equal(route(Number(width), key), Number(index), `${queue} ${width} ${key}`);
    assert.equal(partitionName(queue, Number(index), Number(width)), name);
    assert.equal(slot(name), Number(at));
  }
});

test('every share is the module\'s', () => {
  const lines = vectors('shares.tsv');
  assert.equal(lines.length, 1142);
  for (const [width, index, low, high] of lines) {
    assert.deepEqual(share(Number(index), Number(width)), [Number(low), Number(high)]);
  }
});

test('a name that is no queue name, a width out of range or an index past it has no partition', () => {
  const longest = partitionName('q'.repeat(MAX_NAME_LEN), 1023, 1024);
  assert.ok(longest && longest.length <= 128);
  assert.equal(partitionName('q'.repeat(MAX_NAME_LEN + 1), 0, 2), null);
  assert.equal(partitionName('a{b}c', 0, 2), null);
  assert.equal(partitionName('', 0, 2), null);
  assert.equal(partitionName('q', 0, 0), null);
  assert.equal(partitionName('q', 0, 1025), null);
  assert.equal(partitionName('q', 3, 3), null);
  assert.equal(partitionName('q', 0.5, 2), null);
});
