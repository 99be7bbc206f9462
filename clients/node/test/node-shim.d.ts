// The little of Node's types that index.d.ts, test/types.ts and src/ (checkJs) use, for a type
// check where @types/node is not installed (Debian 12 ships it only with its own nodejs package).
declare module 'node:events' {
  export class EventEmitter {
    on(event: string | symbol, listener: (...args: any[]) => void): this;
    once(event: string | symbol, listener: (...args: any[]) => void): this;
    off(event: string | symbol, listener: (...args: any[]) => void): this;
    emit(event: string | symbol, ...args: any[]): boolean;
    listenerCount(event: string | symbol): number;
  }
  export function setMaxListeners(n: number, ...targets: EventTarget[]): void;
}
declare module 'node:crypto' {
  export function randomInt(max: number): number;
}
declare class Buffer extends Uint8Array {
  static from(value: string | ArrayBufferLike | Uint8Array, byteOffset?: number, length?: number): Buffer;
  static byteLength(value: string): number;
  static compare(a: Uint8Array, b: Uint8Array): -1 | 0 | 1;
  subarray(start?: number, end?: number): Buffer;
  toString(encoding?: string): string;
}
declare module 'node:os' {
  export function hostname(): string;
}
declare const process: {
  pid: number;
  on(signal: string, listener: () => void): void;
  off(signal: string, listener: () => void): void;
};
declare function setImmediate(callback: (value?: unknown) => void): unknown;
