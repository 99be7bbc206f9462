// echomq: the Node.js client of EchoMQ, the job queue whose rules run inside Valkey.
export { Queue, CHUNK, PURGE_COUNT, CHILDREN_PAGE } from './queue.js';
export { MAX_CHILDREN, MAX_PARENTS } from './family.js';
export { SWEEP_EVERY, SWEEP_COUNT } from './outbox.js';
export { CANCEL_CHILDREN, CANCEL_DEPTH, CANCEL_READS, EmqCancelIncomplete } from './cancel.js';
export { crc16, slot, queueSlot } from './slot.js';
export { MAX_NAME_LEN, MAX_PARTITIONS, fnv1a32, partitionName, route, share } from './partition.js';
export { Worker, PROTOCOL_MAJOR, MAX_ERROR, SETTLE_BATCH, checkVersion, errorText } from './worker.js';
export { Job, Retry } from './job.js';
export { MAX_HEADERS, parseTraceparent, formatTraceparent } from './headers.js';
export { mint } from './ids.js';
export { eventsKey } from './events.js';
export { quantileBound } from './metrics.js';
export {
  EmqError,
  EmqQueueError,
  EmqTypeError,
  EmqIdError,
  EmqKindError,
  EmqKeyError,
  EmqPayloadError,
  EmqLeaseError,
  EmqCancelledError,
  EmqTimeoutError,
  EmqSetError,
  EmqCursorError,
  EmqCronError,
  EmqParentError,
  EmqSpannedError,
  EmqSpanError,
  EmqNotReplicatedError,
  EmqVersionError,
  translate,
} from './errors.js';
