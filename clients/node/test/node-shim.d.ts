// The little of Node's types that index.d.ts and test/types.ts use, for a type check where
// @types/node is not installed (Debian 12 ships it only with its own nodejs package).
declare module 'node:events' {
  export class EventEmitter {
    on(event: string | symbol, listener: (...args: any[]) => void): this;
    once(event: string | symbol, listener: (...args: any[]) => void): this;
    off(event: string | symbol, listener: (...args: any[]) => void): this;
    emit(event: string | symbol, ...args: any[]): boolean;
    listenerCount(event: string | symbol): number;
  }
}
