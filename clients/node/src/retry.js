// What a failover or a reshard looks like to a client, and how long to wait before trying
// again. node-redis reconnects and follows MOVED/ASK itself; these are the replies it passes on.

/** Replies that mean "not now, here": a slot in migration, a blocked call ended by a failover,
 * a replica promoted or demoted, a server loading, a cluster without a majority. */
export const TRANSIENT_CODES = ['TRYAGAIN', 'UNBLOCKED', 'READONLY', 'LOADING', 'MASTERDOWN', 'CLUSTERDOWN'];

/** node-redis's errors for a connection lost, closed under a command, or not yet back. */
const CONNECTION_ERRORS = new Set([
  'SocketClosedUnexpectedlyError',
  'ClientOfflineError',
  'ConnectionTimeoutError',
  'DisconnectsClientError',
  'RootNodesUnavailableError',
  'SlotUnknownError', // ours (replicas.js): a cluster's map without the slot's primary yet
]);

/** The socket's own errors for a peer gone or out of reach: a write to a node just killed
 * (`EPIPE`), a connection refused, reset, aborted or timed out, a network unreachable. */
const SOCKET_CODES = new Set(['ECONNREFUSED', 'ECONNRESET', 'EPIPE', 'ECONNABORTED', 'ETIMEDOUT', 'EHOSTUNREACH', 'ENETUNREACH', 'ENOTCONN']);

/** Whether trying the same call again, a moment later, may succeed. */
export function transient(error) {
  if (!(error instanceof Error)) return false;
  if (CONNECTION_ERRORS.has(error.constructor.name)) return true;
  if (SOCKET_CODES.has(String(/** @type {{code?: unknown}} */ (error).code))) return true;
  return error.constructor.name === 'ErrorReply' && TRANSIENT_CODES.some((c) => error.message.startsWith(c));
}

/** Whether `error` is a node's `MOVED` or `ASK`: the slot is (going) elsewhere. */
export function moved(error) {
  return error instanceof Error && /^(MOVED|ASK) /.test(error.message);
}

/** Whether a call failing with `error` is tried again later rather than reported: a moment's
 * failure, or a slot on the move (a `MOVED` node-redis gave up following while two primaries'
 * maps disagree, or an `ASK`). */
export function passing(error) {
  return transient(error) || moved(error);
}

/** Replies of a server out of memory or of disk: a claim waits them out (the server takes no
 * write until an operator makes room), where an enqueue reports them to its caller. */
export const FULL_CODES = ['OOM', 'MISCONF'];

/** Whether `error` is a server refusing writes for want of memory or disk. */
export function serverFull(error) {
  return error instanceof Error && error.constructor.name === 'ErrorReply' && FULL_CODES.some((c) => error.message.startsWith(c));
}

/** Milliseconds to wait before try `attempt` (0-based): exponential, capped, full jitter. */
export function backoff(attempt, base = 50, cap = 2000) {
  return Math.random() * Math.min(cap, base * 2 ** attempt);
}

/** Resolves after `ms` milliseconds, or at once when `signal` aborts. */
export function sleep(ms, signal) {
  return new Promise((resolve) => {
    if (signal?.aborted) return resolve(undefined);
    const timer = setTimeout(done, ms);
    function done() {
      clearTimeout(timer);
      signal?.removeEventListener('abort', done);
      resolve(undefined);
    }
    signal?.addEventListener('abort', done, { once: true });
  });
}
