// The client names and routes a partitioned queue's partitions as the module does: every line
// of testing/vectors/partitions.tsv (queue, width, id or group, partition, name, slot).
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { test } from 'node:test';
import { partitionName, route } from '../src/partition.js';
import { slot } from '../src/slot.js';

const vectors = new URL('../../../testing/vectors/partitions.tsv', import.meta.url);

test('every vector routes and names as the module does', () => {
  const lines = readFileSync(vectors, 'utf8')
    .split('\n')
    .filter((line) => line && !line.startsWith('#'))
    .map((line) => line.split('\t'));
  assert.equal(lines.length, 108);
  for (const [queue, width, key, index, name, at] of lines) {
    assert.equal(route(Number(width), key), Number(index), `${queue} ${width} ${key}`);
    assert.equal(partitionName(queue, Number(index), Number(width)), name);
    assert.equal(slot(name), Number(at));
  }
});

test('a name too long, a width out of range or an index past it has no partition', () => {
  assert.equal(partitionName('q'.repeat(113), 0, 2), null);
  assert.equal(partitionName('q', 0, 0), null);
  assert.equal(partitionName('q', 0, 1025), null);
  assert.equal(partitionName('q', 3, 3), null);
});
