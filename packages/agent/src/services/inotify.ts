import { readlinkSync, readSync } from 'node:fs';
import { MessageChannel, Worker, type MessagePort } from 'node:worker_threads';

/** The inotify(7) mask bits a watch reads (the ones libuv asks the kernel for, plus what the kernel adds). */
export const IN = {
  MODIFY: 0x2,
  ATTRIB: 0x4,
  MOVED_FROM: 0x40,
  MOVED_TO: 0x80,
  CREATE: 0x100,
  DELETE: 0x200,
  DELETE_SELF: 0x400,
  MOVE_SELF: 0x800,
  UNMOUNT: 0x2000,
  Q_OVERFLOW: 0x4000,
  IGNORED: 0x8000,
  ISDIR: 0x40000000,
} as const;

/** Who receives the events of the folders it armed. */
export interface KernelListener {
  /** One event of a folder this listener armed (`wd` as {@link Inotify.arm} answered); `name` is '' for the folder itself. */
  kernelEvent(wd: number, mask: number, name: string): void;
  /** The kernel's queue overflowed (or may have): events of any folder were lost. */
  kernelOverflow(): void;
  /** The watch service stopped: nothing more will be reported. */
  kernelLost(): void;
  /** True while the listener holds all the changes it may: reading the kernel now would only drop them. */
  saturated(): boolean;
}

/** One folder to arm: an open descriptor of it, and its kernel identity (`ino:sdev` in hex, as /proc's fdinfo prints it). */
export interface ArmItem {
  fd: number;
  key: string;
}

/** A folder armed (`handle` to disarm it, `wd` its kernel watch), or why not (`ENOSPC`: the kernel's watch budget; `EMFILE`: its instance budget). */
export type ArmResult = { handle: number; wd: number } | { error: string };

/** Bytes read from the kernel per turn of the event loop: about 2,000 events. */
const READ_BYTES = 64 * 1024;
/** How often an idle watch looks for events, first and at most (doubling while nothing comes). */
const POLL_MIN_MS = 10;
const POLL_MAX_MS = 80;
/** While every watch is full, how long reading waits (the kernel queues meanwhile, and says when it overflows). */
const SATURATED_WAIT_MS = 20;
/** How long the watch thread outlives the last watch (a new watch soon after reuses it). */
const IDLE_STOP_MS = 5000;
/** Events that libuv read in the watch thread (see the worker's source) past which a kernel overflow may have been among them. */
const STOLEN_OVERFLOW = 256;
/** In loop mode: events the watch thread keeps while the main thread has two batches unanswered, and the size of a batch. */
const LOOP_BUFFER = 16_384;
const LOOP_BATCH = 2048;

/**
 * The watch thread. It owns the inotify instance (created by libuv at its first `fs.watch`) and
 * adds and removes kernel watches when told, but never lets its event loop run while watches may
 * have events: the main thread reads the instance's descriptor itself. That is the point: libuv
 * reads inotify in a loop until the kernel has nothing left, calling back once per event, so a
 * process that makes changes faster than the callbacks run held the daemon's only thread for as
 * long as it kept going; and libuv drops the kernel's IN_Q_OVERFLOW, so changes were lost without
 * a word. Closed handles finish on the event loop, so after closing some the thread runs two
 * turns of it; whatever libuv reads meanwhile goes to the main thread as `events`.
 *
 * Where /proc does not show the instance (gVisor names no `anon_inode:inotify` and lists no
 * watches in fdinfo), the thread runs its loop instead ("loop" mode): libuv reads there, and the
 * thread sends what it reads in batches, at most two unanswered at a time, keeping at most
 * {@link LOOP_BUFFER} events meanwhile and counting the rest as dropped. The main thread still
 * never stalls; what libuv drops of the kernel's own overflow is not seen there.
 */
const WORKER_SOURCE = `'use strict';
const { workerData, receiveMessageOnPort } = require('node:worker_threads');
const fs = require('node:fs');
const port = workerData.port;
const wake = new Int32Array(workerData.wake);
const LOOP_BUFFER = workerData.loopBuffer;
const LOOP_BATCH = workerData.loopBatch;
const handles = new Map();
let inotifyFd = -1;
let mode = 'unknown';
let events = [];
let dropped = 0;
let inFlight = 0;
let flushing = false;
const inotifyFds = () => {
  const found = [];
  for (const name of fs.readdirSync('/proc/self/fd')) {
    try {
      if (fs.readlinkSync('/proc/self/fd/' + name) === 'anon_inode:inotify') found.push(Number(name));
    } catch {}
  }
  return found;
};
const before = new Set(inotifyFds());
const watchesOf = (fd) => {
  const byKey = new Map();
  let text = '';
  try {
    text = fs.readFileSync('/proc/self/fdinfo/' + fd, 'latin1');
  } catch {
    return byKey;
  }
  const line = /^inotify wd:([0-9a-f]+) ino:([0-9a-f]+) sdev:([0-9a-f]+)/gm;
  for (let m = line.exec(text); m !== null; m = line.exec(text)) byKey.set(m[2] + ':' + m[3], parseInt(m[1], 16));
  return byKey;
};
const flush = () => {
  flushing = false;
  if (inFlight >= 2 || (events.length === 0 && dropped === 0)) return;
  port.postMessage({ op: 'events', events, dropped });
  events = [];
  dropped = 0;
  inFlight++;
};
const heard = (handle, type, name) => {
  if (events.length >= LOOP_BUFFER * 3) {
    dropped++;
    return;
  }
  events.push(handle, type === 'change' ? 1 : 0, name === null || name === '.' ? '' : String(name));
  if (mode !== 'loop') return;
  // libuv may call back for a long time before the loop turns again: send from here as well.
  if (events.length >= LOOP_BATCH * 3) flush();
  else if (!flushing) {
    flushing = true;
    setImmediate(flush);
  }
};
let closed = false;
const close = (handle) => {
  const watcher = handles.get(handle);
  if (watcher === undefined) return;
  handles.delete(handle);
  watcher.close();
  closed = true;
};
const arm = (items) => {
  const results = [];
  for (const item of items) {
    try {
      const watcher = fs.watch('/proc/self/fd/' + item.fd + '/.', { persistent: false }, (type, name) => heard(item.handle, type, name));
      watcher.on('error', () => {});
      handles.set(item.handle, watcher);
      results.push({ handle: item.handle, key: item.key });
    } catch (err) {
      results.push({ handle: item.handle, error: (err && err.code) || 'EIO' });
    }
  }
  const armed = results.filter((r) => r.key !== undefined);
  if (armed.length === 0) return results;
  if (mode === 'unknown') {
    for (const fd of inotifyFds()) {
      if (!before.has(fd) && watchesOf(fd).has(armed[0].key)) {
        inotifyFd = fd;
        break;
      }
    }
    mode = inotifyFd < 0 ? 'loop' : 'read';
  }
  const byKey = mode === 'read' ? watchesOf(inotifyFd) : undefined;
  for (const result of armed) {
    const wd = byKey === undefined ? 0x80000000 + result.handle : byKey.get(result.key);
    delete result.key;
    if (wd === undefined) {
      close(result.handle);
      result.error = 'ENOTSUP';
    } else result.wd = wd;
  }
  return results;
};
const handle = (message) => {
  if (message.op === 'arm') {
    const results = arm(message.items);
    port.postMessage({ op: 'armed', seq: message.seq, inotifyFd, mode, results });
  } else if (message.op === 'disarm') {
    for (const h of message.handles) close(h);
  } else if (message.op === 'ack') {
    inFlight = Math.max(0, inFlight - 1);
    if (mode === 'loop') flush();
  } else if (message.op === 'quit') {
    process.exit(0);
  }
};
const turn = () => new Promise((resolve) => setImmediate(resolve));
(async () => {
  while (mode !== 'loop') {
    Atomics.wait(wake, 0, 0);
    Atomics.store(wake, 0, 0);
    for (let received = receiveMessageOnPort(port); received !== undefined && mode !== 'loop'; received = receiveMessageOnPort(port)) handle(received.message);
    if (closed) {
      closed = false;
      await turn();
      await turn();
      if (events.length > 0) {
        port.postMessage({ op: 'events', events, dropped: 0, turn: true });
        events = [];
      }
    }
  }
  // Loop mode from here: messages arrive as events, and libuv reads the instance.
  for (let received = receiveMessageOnPort(port); received !== undefined; received = receiveMessageOnPort(port)) handle(received.message);
  port.on('message', handle);
})();
`;

interface Armed {
  op: 'armed';
  seq: number;
  inotifyFd: number;
  /** `read`: this thread reads the instance; `loop`: the watch thread's loop does, and sends events. */
  mode: 'read' | 'loop' | 'unknown';
  results: ({ handle: number; wd: number } | { handle: number; error: string })[];
}

interface Heard {
  op: 'events';
  /** Flat triples: handle, 1 for a change (0 otherwise), name ('' for the folder itself). */
  events: (number | string)[];
  /** Events the watch thread could not keep. */
  dropped: number;
  /** Read by libuv while the thread turned its loop to finish closed handles (read mode). */
  turn?: boolean;
}

interface Route {
  wd: number;
  listener: KernelListener;
}

/**
 * The daemon's one inotify instance, for every watch of every connection: kernel watches are added
 * in a worker thread (see {@link WORKER_SOURCE} for why) and the events read here, a bounded piece
 * per turn of the event loop, so a flood of changes costs turns, never the thread. Reading pauses
 * while every listener is full; the kernel then queues up to its `max_queued_events` and reports
 * its own overflow, which reaches every listener. The thread and the instance exist only while
 * watches do.
 *
 * @example
 * const [armed] = await Inotify.shared().arm(listener, [{ fd, key: '25cb2c:fe00000' }]);
 */
export class Inotify {
  private static instance: Inotify | undefined;
  private worker: Worker | undefined;
  private port: MessagePort | undefined;
  private wake: Int32Array | undefined;
  private fd = -1;
  private nextHandle = 1;
  private nextSeq = 1;
  private readonly waiting = new Map<number, { resolve: (armed: Armed) => void; reject: (err: Error) => void }>();
  private readonly byHandle = new Map<number, Route>();
  private readonly byWd = new Map<number, Map<KernelListener, number>>();
  private readonly listeners = new Map<KernelListener, number>();
  private readonly buffer = Buffer.allocUnsafe(READ_BYTES);
  private timer: NodeJS.Timeout | undefined;
  private immediate: NodeJS.Immediate | undefined;
  private pollMs = POLL_MIN_MS;
  private stopTimer: NodeJS.Timeout | undefined;
  /** The watch thread reads the instance itself and sends events (where /proc does not show the instance). */
  private loopMode = false;

  /** The process's instance (one inotify instance per daemon, whatever the number of watches). */
  static shared(): Inotify {
    Inotify.instance ??= new Inotify();
    return Inotify.instance;
  }

  /** Kernel watches held now, and whether the thread (and its inotify instance) exists. */
  counts(): { handles: number; instances: number } {
    return { handles: this.byHandle.size, instances: this.worker ? 1 : 0 };
  }

  /**
   * Adds a kernel watch for each folder (held open by its descriptor, which the caller closes
   * once this resolves) and routes its events to `listener`.
   */
  async arm(listener: KernelListener, items: readonly ArmItem[]): Promise<ArmResult[]> {
    if (items.length === 0) return [];
    clearTimeout(this.stopTimer);
    this.stopTimer = undefined;
    const { port, wake } = this.start();
    const seq = this.nextSeq++;
    const request = items.map((item) => ({ handle: this.nextHandle++, fd: item.fd, key: item.key }));
    const armed = await new Promise<Armed>((resolve, reject) => {
      this.waiting.set(seq, { resolve, reject });
      // An answer awaited keeps the process alive; watches alone do not (as fs.watch's persistent: false).
      port.ref();
      port.postMessage({ op: 'arm', seq, items: request });
      Atomics.store(wake, 0, 1);
      Atomics.notify(wake, 0);
    }).catch((): Armed => ({ op: 'armed', seq, inotifyFd: -1, mode: 'unknown', results: request.map((r) => ({ handle: r.handle, error: 'EIO' })) }));
    if (this.fd < 0 && armed.mode === 'read' && armed.inotifyFd >= 0 && this.worker) this.fd = armed.inotifyFd;
    const results = armed.results.map((result): ArmResult => {
      if ('error' in result) return { error: result.error };
      this.route(result.handle, result.wd, listener);
      return { handle: result.handle, wd: result.wd };
    });
    // Reading stops whenever no watch is left; it starts again here.
    if (this.byHandle.size > 0) this.schedule(0);
    return results;
  }

  /** Removes kernel watches; their events stop reaching anyone at once. */
  disarm(handles: readonly number[]): void {
    const closing: number[] = [];
    for (const handle of handles) {
      const route = this.byHandle.get(handle);
      if (!route) continue;
      this.byHandle.delete(handle);
      closing.push(handle);
      const listeners = this.byWd.get(route.wd);
      const left = (listeners?.get(route.listener) ?? 1) - 1;
      if (left > 0) listeners!.set(route.listener, left);
      else listeners?.delete(route.listener);
      if (listeners?.size === 0) this.byWd.delete(route.wd);
      const held = (this.listeners.get(route.listener) ?? 1) - 1;
      if (held > 0) this.listeners.set(route.listener, held);
      else this.listeners.delete(route.listener);
    }
    if (closing.length > 0 && this.port && this.wake) {
      this.port.postMessage({ op: 'disarm', handles: closing });
      Atomics.store(this.wake, 0, 1);
      Atomics.notify(this.wake, 0);
    }
    if (this.byHandle.size === 0 && this.waiting.size === 0 && this.worker && !this.stopTimer) {
      this.stopTimer = setTimeout(() => this.stop(), IDLE_STOP_MS);
      this.stopTimer.unref();
    }
  }

  private route(handle: number, wd: number, listener: KernelListener): void {
    this.byHandle.set(handle, { wd, listener });
    let listeners = this.byWd.get(wd);
    if (!listeners) this.byWd.set(wd, (listeners = new Map<KernelListener, number>()));
    listeners.set(listener, (listeners.get(listener) ?? 0) + 1);
    this.listeners.set(listener, (this.listeners.get(listener) ?? 0) + 1);
  }

  private start(): { port: MessagePort; wake: Int32Array } {
    if (this.worker && this.port && this.wake) return { port: this.port, wake: this.wake };
    const { port1, port2 } = new MessageChannel();
    const wake = new Int32Array(new SharedArrayBuffer(4));
    const worker = new Worker(WORKER_SOURCE, {
      eval: true,
      workerData: { port: port2, wake: wake.buffer, loopBuffer: LOOP_BUFFER, loopBatch: LOOP_BATCH },
      transferList: [port2],
      execArgv: [],
      resourceLimits: { maxOldGenerationSizeMb: 32, maxYoungGenerationSizeMb: 2 },
    });
    port1.on('message', (message: Armed | Heard) => this.onMessage(message, port1));
    // After the listener, which refs the port: neither the thread nor its port keeps the process alive.
    worker.unref();
    port1.unref();
    worker.once('exit', () => this.onExit(worker));
    worker.once('error', () => undefined);
    this.worker = worker;
    this.port = port1;
    this.wake = wake;
    return { port: port1, wake };
  }

  private onMessage(message: Armed | Heard, port: MessagePort): void {
    if (message.op === 'armed') {
      if (message.mode === 'loop' && port === this.port) this.loopMode = true;
      const waiter = this.waiting.get(message.seq);
      this.waiting.delete(message.seq);
      if (this.waiting.size === 0) port.unref();
      waiter?.resolve(message);
      return;
    }
    // Events libuv read in the watch thread: a change or something else, per name.
    const events = message.events;
    for (let i = 0; i + 2 < events.length; i += 3) {
      const route = this.byHandle.get(events[i] as number);
      if (!route) continue;
      const name = events[i + 2] as string;
      const mask = events[i + 1] === 1 ? IN.MODIFY : name === '' ? IN.MOVE_SELF : IN.CREATE | IN.DELETE;
      route.listener.kernelEvent(route.wd, mask, name);
    }
    // libuv drops IN_Q_OVERFLOW: after a read that large while turning the loop, say it may have
    // been there; and what the thread could not keep was dropped.
    if (message.dropped > 0 || (message.turn === true && events.length / 3 >= STOLEN_OVERFLOW))
      for (const listener of [...this.listeners.keys()]) listener.kernelOverflow();
    // In loop mode the thread sends at most two batches before an answer.
    if (this.loopMode && port === this.port) port.postMessage({ op: 'ack' });
  }

  private onExit(worker: Worker): void {
    if (this.worker !== worker) return;
    this.fd = -1;
    this.loopMode = false;
    this.worker = undefined;
    this.port?.close();
    this.port = undefined;
    this.wake = undefined;
    clearTimeout(this.timer);
    this.timer = undefined;
    if (this.immediate) clearImmediate(this.immediate);
    this.immediate = undefined;
    for (const waiter of this.waiting.values()) waiter.reject(new Error('the watch thread stopped'));
    this.waiting.clear();
    const listeners = [...this.listeners.keys()];
    this.byHandle.clear();
    this.byWd.clear();
    this.listeners.clear();
    for (const listener of listeners) listener.kernelLost();
  }

  private stop(): void {
    this.stopTimer = undefined;
    const { worker, port, wake } = this;
    if (this.byHandle.size > 0 || this.waiting.size > 0 || !worker || !port || !wake) return;
    // Stop reading before the descriptor can close and its number be given to something else;
    // a watch armed from now on starts a thread of its own.
    this.fd = -1;
    this.loopMode = false;
    this.worker = undefined;
    this.port = undefined;
    this.wake = undefined;
    clearTimeout(this.timer);
    this.timer = undefined;
    port.postMessage({ op: 'quit' });
    Atomics.store(wake, 0, 1);
    Atomics.notify(wake, 0);
    worker.once('exit', () => port.close());
    setTimeout(() => void worker.terminate(), 1000).unref();
  }

  private schedule(ms: number): void {
    if (this.timer || this.immediate) return;
    if (ms === 0) {
      this.immediate = setImmediate(() => {
        this.immediate = undefined;
        this.pump();
      });
      return;
    }
    this.timer = setTimeout(() => {
      this.timer = undefined;
      this.pump();
    }, ms);
    this.timer.unref();
  }

  // Reads one piece of what the kernel holds and hands each event to its listeners.
  private pump(): void {
    if (this.fd < 0 || this.byHandle.size === 0) return;
    if ([...this.listeners.keys()].every((listener) => listener.saturated())) return this.schedule(SATURATED_WAIT_MS);
    let bytes: number;
    try {
      // The number is the worker's inotify descriptor only while the worker lives; make sure.
      if (readlinkSync(`/proc/self/fd/${this.fd}`) !== 'anon_inode:inotify') throw new Error('not inotify');
      bytes = readSync(this.fd, this.buffer, 0, READ_BYTES, null);
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code === 'EAGAIN') {
        const wait = this.pollMs;
        this.pollMs = Math.min(POLL_MAX_MS, this.pollMs * 2);
        return this.schedule(wait);
      }
      this.fd = -1;
      void this.worker?.terminate();
      return;
    }
    this.pollMs = POLL_MIN_MS;
    this.dispatch(bytes);
    this.schedule(0);
  }

  private dispatch(bytes: number): void {
    const buf = this.buffer;
    for (let at = 0; at + 16 <= bytes;) {
      const wd = buf.readInt32LE(at);
      const mask = buf.readUInt32LE(at + 4);
      const length = buf.readUInt32LE(at + 12);
      const start = at + 16;
      at = start + length;
      if (mask & IN.Q_OVERFLOW) {
        for (const listener of [...this.listeners.keys()]) listener.kernelOverflow();
        continue;
      }
      const listeners = this.byWd.get(wd);
      if (!listeners) continue;
      let end = length === 0 ? start : buf.indexOf(0, start);
      if (end < 0 || end > at) end = at;
      const name = end === start ? '' : buf.toString('utf8', start, end);
      // kernelEvent only gathers (it never arms or disarms), so the map cannot change meanwhile.
      for (const listener of listeners.keys()) listener.kernelEvent(wd, mask, name);
    }
  }
}
