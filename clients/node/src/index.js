// echomq: the Node.js client of EchoMQ, the job queue whose rules run inside Valkey.
export { Queue, CHUNK, PURGE_COUNT } from './queue.js';
export { Worker, PROTOCOL_MAJOR, MAX_ERROR, SETTLE_BATCH, checkVersion, errorText } from './worker.js';
export { Job, Retry } from './job.js';
export { mint } from './ids.js';
export { eventsKey } from './events.js';
export {
  EmqError,
  EmqQueueError,
  EmqTypeError,
  EmqIdError,
  EmqKindError,
  EmqKeyError,
  EmqPayloadError,
  EmqLeaseError,
  EmqSetError,
  EmqCursorError,
  EmqCronError,
  EmqVersionError,
  translate,
} from './errors.js';
