// The error catalogue as classes: each EchoMQ refusal (an error reply starting with an EMQ*
// code) becomes a subclass of EmqError; any other error stays the client's own, untouched.

/** A refusal from the EchoMQ module; `code` is its reply's first word. */
export class EmqError extends Error {
  /**
   * @param {string} message the server's reply, code first
   * @param {unknown} [cause] the client library's error it came as
   */
  constructor(message, cause) {
    super(message, cause === undefined ? undefined : { cause });
    this.name = new.target.name;
    this.code = message.split(' ', 1)[0];
  }
}

/** `EMQQUEUE`: the queue name is not 1-128 printable ASCII bytes without braces. */
export class EmqQueueError extends EmqError {}
/** `EMQTYPE`: an unknown key type. */
export class EmqTypeError extends EmqError {}
/** `EMQID`: a malformed branded id. */
export class EmqIdError extends EmqError {}
/** `EMQKIND`: an id of another kind than `JOB` at enqueue. */
export class EmqKindError extends EmqError {}
/** `EMQKEY`: a key outside the grammar. */
export class EmqKeyError extends EmqError {}
/** `EMQPAYLOAD`: a payload (or result, progress, error text) over `emq.max-payload-bytes`. */
export class EmqPayloadError extends EmqError {}
/** `EMQLEASE`: the lease token is stale or missing; the job is no longer this worker's. */
export class EmqLeaseError extends EmqError {}
/** `EMQCANCELLED`: the job was cancelled (`EMQ.CANCEL`) while this attempt ran; it is dead with
 * the error `cancelled`, and this attempt's renewal or settle is refused. */
export class EmqCancelledError extends EmqError {}
/** `EMQTIMEOUT`: this attempt ran past its deadline (the job's `timeout`, or its queue's): its
 * renewal is refused, and the server fails the attempt with the error `timeout` (a retry, or
 * dead after the last attempt). A late settle of it is `EMQLEASE`, as for any stale token. */
export class EmqTimeoutError extends EmqError {}
/** `EMQSET`: an unknown set name, or a purge of the active set. */
export class EmqSetError extends EmqError {}
/** `EMQCURSOR`: a cursor no reply gave. */
export class EmqCursorError extends EmqError {}
/** `EMQCRON`: a repeating schedule refused (the parser's reason, or a full queue). */
export class EmqCronError extends EmqError {}
/** `EMQPARENT`: a child's parent refused it (no such parent, not waiting, or all its children). */
export class EmqParentError extends EmqError {}
/** `EMQSPANNED <n>`: a job or a claim sent to a partitioned queue's own name, or a job sent to
 * a partition its group (or else its id) does not route to; `width` is that queue's `n`, for
 * the client to route again (docs/cluster.md, "A queue bigger than one primary"). */
export class EmqSpannedError extends EmqError {
  /**
   * @param {string} message
   * @param {unknown} [cause]
   */
  constructor(message, cause) {
    super(message, cause);
    /** The partitions of the queue that refused, as the server knows them. */
    this.width = Number(message.split(' ', 2)[1]);
  }
}
/** `EMQSPAN`: `EMQ.SPAN` of a queue that holds jobs or has another width or place already, or
 * `EMQ.UNSPAN` of a partition that holds jobs. */
export class EmqSpanError extends EmqError {}

/** A write the primary took that fewer replicas confirmed than the queue's `waitReplicas` asks
 * (`WAIT` reported `replicas`): it may be lost in a failover. `ids`: the jobs of the
 * unconfirmed writes; `enqueued`: every job the call enqueued (each taken by the primary), in
 * order. Not a server refusal: its `code` is empty. */
export class EmqNotReplicatedError extends EmqError {
  /**
   * @param {string[]} ids
   * @param {number} replicas
   * @param {number} wanted
   * @param {string[]} [enqueued]
   */
  constructor(ids, replicas, wanted, enqueued = ids) {
    const some = ids.slice(0, 3).join(', ') + (ids.length > 3 ? ', ...' : '');
    super(`${ids.length} job(s) taken by the primary but confirmed by ${replicas} of the ${wanted} replicas asked: they may be lost in a failover (${some})`);
    this.code = '';
    this.ids = ids;
    this.replicas = replicas;
    this.wanted = wanted;
    this.enqueued = enqueued;
  }
}

/** The server speaks another major version of the protocol than this client (no reply code). */
export class EmqVersionError extends Error {
  /** @param {string} message */
  constructor(message) {
    super(message);
    this.name = 'EmqVersionError';
  }
}

/** @type {Record<string, new (message: string, cause?: unknown) => EmqError>} */
export const CODES = {
  EMQQUEUE: EmqQueueError,
  EMQTYPE: EmqTypeError,
  EMQID: EmqIdError,
  EMQKIND: EmqKindError,
  EMQKEY: EmqKeyError,
  EMQPAYLOAD: EmqPayloadError,
  EMQLEASE: EmqLeaseError,
  EMQCANCELLED: EmqCancelledError,
  EMQTIMEOUT: EmqTimeoutError,
  EMQSET: EmqSetError,
  EMQCURSOR: EmqCursorError,
  EMQCRON: EmqCronError,
  EMQPARENT: EmqParentError,
  EMQSPANNED: EmqSpannedError,
  EMQSPAN: EmqSpanError,
};

/** Whether `value` is a server's error reply (node-redis's `ErrorReply`, top level or in place). */
export function isErrorReply(value) {
  return value instanceof Error && value.constructor.name === 'ErrorReply';
}

/**
 * The typed error for a server refusal, or `error` itself when it is not one of EchoMQ's.
 * @param {unknown} error
 * @returns {unknown}
 */
export function translate(error) {
  if (!isErrorReply(error) || error instanceof EmqError) return error;
  const message = /** @type {Error} */ (error).message;
  const Class = CODES[message.split(' ', 1)[0]];
  return Class ? new Class(message, error) : error;
}
