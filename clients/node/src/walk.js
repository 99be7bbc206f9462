// Paging a partitioned queue's sets and groups as one (docs/cluster.md, "A queue bigger than one
// primary"): the cursor `<index>:<inner>` names a partition (0-based) and the server's cursor
// there. A walk starts at `0`, takes one partition's pages until its cursor comes back `0`, then
// goes on at `<index+1>:0`, and ends, `0`, after the last partition; a partition with nothing
// left is passed over in the same call, so only the walk's end answers an empty page. The
// client checks the `<index>:` part only; `inner` is the server's to check (`EMQ.JOBS`:
// `EMQCURSOR`, `EmqCursorError`; `EMQ.GROUPS`: an `ERR` reply).

/**
 * @typedef {import('./queue.js').Queue} Queue
 * @typedef {{cursor: string, rows: any[]}} Page a page as one partition answers it
 */

/**
 * The partition and its server cursor a partitioned queue's cursor names: `0` is the walk's
 * start; any other is `<index>:<inner>`, `index` in decimal below `width` and `inner` not
 * empty, passed on unread (the server checks it). A cursor whose partition is not one of the
 * queue's throws a `RangeError` (a `TypeError` for a cursor that is not a string) before
 * anything is sent.
 * @param {unknown} cursor
 * @param {number} width
 * @returns {{index: number, inner: string}}
 */
export function splitCursor(cursor, width) {
  if (typeof cursor !== 'string') throw new TypeError(`a cursor is a string, not ${typeof cursor}`);
  if (cursor === '0') return { index: 0, inner: '0' };
  const found = /^(0|[1-9][0-9]{0,3}):(.+)$/s.exec(cursor);
  if (found === null || Number(found[1]) >= width) {
    throw new RangeError(`${JSON.stringify(cursor)} names no partition of a queue of ${width} partitions: give '0' or a page's cursor, '<partition>:<cursor there>'`);
  }
  return { index: Number(found[1]), inner: found[2] };
}

/**
 * One page of a walk over `parts` (a partitioned queue's partitions, in order) from `cursor`:
 * `read(partition, inner)` reads a page of one. The page's rows are one partition's; its
 * cursor, `0` at the walk's end.
 * @param {Queue[]} parts
 * @param {unknown} cursor
 * @param {(part: Queue, inner: string) => Promise<Page>} read
 * @returns {Promise<Page>}
 */
export async function walk(parts, cursor, read) {
  let { index, inner } = splitCursor(cursor, parts.length);
  for (;;) {
    const page = await read(parts[index], inner);
    if (page.cursor !== '0') return { cursor: `${index}:${page.cursor}`, rows: page.rows };
    index += 1;
    if (index === parts.length) return { cursor: '0', rows: page.rows };
    if (page.rows.length > 0) return { cursor: `${index}:0`, rows: page.rows };
    inner = '0';
  }
}
