import type { MessageInitShape } from '@bufbuild/protobuf';
import { timestampFromMs } from '@bufbuild/protobuf/wkt';
import { Code, ConnectError, type ConnectRouter, type HandlerContext } from '@connectrpc/connect';
import type { ProcessInfo as WarrenProcess, Result } from '@warren/protocol';
import { posix } from 'node:path';
import type { HttpServerDeps } from '../http.js';
import { notServed, toConnectError } from './errors.js';
import { envdScope, openSession, resolvePath, type EnvdScope } from './envd-scope.js';
import type { DaemonSession } from './daemon-session.js';
import { FileType, Filesystem, type EntryInfo } from './gen/filesystem/filesystem_pb.js';
import { Process, ProcessEventSchema, Signal, type ProcessSelector } from './gen/process/process_pb.js';

/** The most entries one ListDir answers (Warren's own listing cap). */
const MAX_LIST_ENTRIES = 100_000;
/** envd's keepalive interval when the client names none (`Keepalive-Ping-Interval`, seconds). */
const DEFAULT_KEEPALIVE_SECONDS = 90;
/** Output events waiting for a slow client before the stream fails (bounded memory per stream). */
const MAX_QUEUED_EVENTS = 4096;

/** One message of a Start or Connect stream (both are `{ event: ProcessEvent }`). */
type EventInit = { event: MessageInitShape<typeof ProcessEventSchema> };
type EventCase = NonNullable<MessageInitShape<typeof ProcessEventSchema>['event']>;
const message = (event: EventCase): EventInit => ({ event: { event } });

/** Registers envd's `process.Process` and `filesystem.Filesystem` services, each call served through the sandbox's daemon. */
export function envdRoutes(deps: HttpServerDeps): (router: ConnectRouter) => void {
  const scopeOf = (ctx: HandlerContext) => envdScope(deps, (name) => ctx.requestHeader.get(name) ?? undefined);
  /** Runs `fn` with a daemon session of the request's caller; Warren errors become Connect errors. */
  async function unary<T>(ctx: HandlerContext, fn: (session: DaemonSession, scope: EnvdScope) => Promise<T>): Promise<T> {
    try {
      const scope = scopeOf(ctx);
      const session = await openSession(scope);
      try {
        return await fn(session, scope);
      } finally {
        session.close();
      }
    } catch (err) {
      throw toConnectError(err);
    }
  }

  return (router) => {
    router.service(Process, {
      async *start(req, ctx) {
        if (req.pty) throw notServed('A PTY (sandbox.pty.create)', 'Run commands with sandbox.commands.run; Warren has terminals on its own API (pty.open).');
        const config = req.process;
        if (!config?.cmd) throw new ConnectError('process.cmd is required.', Code.InvalidArgument);
        let session: DaemonSession | undefined;
        try {
          const scope = scopeOf(ctx);
          session = await openSession(scope);
          const lifetime = ctx.timeoutMs();
          const { result } = await session.call('process.start', {
            cmd: [config.cmd, ...config.args],
            cwd: config.cwd === undefined ? scope.home : resolvePath(scope, config.cwd),
            ...(Object.keys(config.envs).length > 0 && { env: config.envs }),
            keepStdinOpen: req.stdin !== false,
            ...(req.tag !== undefined && { tag: req.tag.slice(0, 200) }),
            ...(lifetime !== undefined && lifetime > 0 && { timeoutMs: Math.ceil(lifetime) }),
          });
          yield message({ case: 'start', value: { pid: result.pid } });
          yield* follow(session, result.handle, ctx);
        } catch (err) {
          throw toConnectError(err);
        } finally {
          session?.close();
        }
      },
      async *connect(req, ctx) {
        let session: DaemonSession | undefined;
        try {
          session = await openSession(scopeOf(ctx));
          const found = await find(session, req.process);
          yield message({ case: 'start', value: { pid: found.pid } });
          yield* follow(session, found.handle, ctx);
        } catch (err) {
          throw toConnectError(err);
        } finally {
          session?.close();
        }
      },
      list: (_req, ctx) =>
        unary(ctx, async (session) => {
          const { result } = await session.call('process.list', {});
          return {
            processes: result.processes
              .filter((p) => p.running)
              .map((p) => ({ pid: p.pid, ...(p.tag !== undefined && { tag: p.tag }), config: { cmd: p.cmd, args: [], envs: {} } })),
          };
        }),
      sendInput: (req, ctx) =>
        unary(ctx, async (session) => {
          const input = req.input?.input;
          if (input?.case === 'pty') throw notServed('PTY input', 'Warren serves no PTY through this gateway.');
          const found = await find(session, req.process);
          await session.call('process.write', { handle: found.handle }, { payload: input?.case === 'stdin' ? input.value : new Uint8Array() });
          return {};
        }),
      sendSignal: (req, ctx) =>
        unary(ctx, async (session) => {
          const found = await find(session, req.process);
          await session.call('process.kill', { handle: found.handle, signal: req.signal === Signal.SIGTERM ? 'SIGTERM' : 'SIGKILL' });
          return {};
        }),
      closeStdin: (req, ctx) =>
        unary(ctx, async (session) => {
          const found = await find(session, req.process);
          await session.call('process.closeStdin', { handle: found.handle });
          return {};
        }),
      update: async () => {
        throw notServed('Resizing a PTY (Process/Update)', 'Warren serves no PTY through this gateway.');
      },
      streamInput: async () => {
        throw notServed('Process/StreamInput (client streaming)', 'Send input with Process/SendInput (commands.sendStdin does).');
      },
    });

    router.service(Filesystem, {
      stat: (req, ctx) =>
        unary(ctx, async (session, scope) => {
          const path = resolvePath(scope, req.path);
          return { entry: await entryAt(session, path) };
        }),
      makeDir: (req, ctx) =>
        unary(ctx, async (session, scope) => {
          const path = resolvePath(scope, req.path);
          const { result } = await session.call('fs.mkdir', { path, parents: true });
          if (!result.created) throw new ConnectError(`Folder '${req.path}' already exists.`, Code.AlreadyExists);
          return { entry: await entryAt(session, path) };
        }),
      move: (req, ctx) =>
        unary(ctx, async (session, scope) => {
          const to = resolvePath(scope, req.destination);
          await session.call('fs.move', { from: resolvePath(scope, req.source), to });
          return { entry: await entryAt(session, to) };
        }),
      remove: (req, ctx) =>
        unary(ctx, async (session, scope) => {
          await session.call('fs.delete', { path: resolvePath(scope, req.path), recursive: true });
          return {};
        }),
      listDir: (req, ctx) =>
        unary(ctx, async (session, scope) => {
          const path = resolvePath(scope, req.path);
          const depth = Math.max(1, Math.min(req.depth || 1, 64));
          const entries: EntryInit[] = [];
          let cursor: string | undefined;
          do {
            const { result } = await session.call('fs.list', { path, recursive: depth > 1, maxDepth: depth, ...(cursor !== undefined && { cursor }) });
            for (const e of result.entries) entries.push(listedEntry(path, e));
            cursor = result.nextCursor;
          } while (cursor !== undefined && entries.length < MAX_LIST_ENTRIES);
          return { entries };
        }),
      watchDir: async function* () {
        yield* [];
        throw notServed('Watching a folder (files.watchDir)', 'Poll with files.list, or run inotifywait through commands.run.');
      },
      createWatcher: async () => {
        throw notServed('Watching a folder (Filesystem/CreateWatcher)', 'Poll with files.list.');
      },
      getWatcherEvents: async () => {
        throw notServed('Watching a folder (Filesystem/GetWatcherEvents)', 'Poll with files.list.');
      },
      removeWatcher: async () => {
        throw notServed('Watching a folder (Filesystem/RemoveWatcher)', 'Poll with files.list.');
      },
    });
  };
}

/** The Warren process an E2B selector names (`pid` or `tag`), or E2B's not_found. */
async function find(session: DaemonSession, selector: ProcessSelector | undefined): Promise<WarrenProcess> {
  const which = selector?.selector;
  if (which?.case === undefined) throw new ConnectError('Select the process by pid or tag.', Code.InvalidArgument);
  const { result } = await session.call('process.list', {});
  const found = result.processes.find((p) => (which.case === 'pid' ? p.pid === which.value : p.tag === which.value));
  if (!found) throw new ConnectError(`Process with ${which.case} ${which.value} not found (it may have ended).`, Code.NotFound);
  return found;
}

/**
 * Streams a process's output as envd's data events and ends with its end event, with keepalives
 * while it is quiet. The output comes from `process.attach` (replayed from the start, then live);
 * the process itself lives on if the client goes away.
 */
async function* follow(session: DaemonSession, handle: string, ctx: HandlerContext): AsyncGenerator<EventInit> {
  const queue: EventInit[] = [];
  let wake: (() => void) | undefined;
  let finished: { info?: WarrenProcess; error?: unknown } | undefined;
  const push = (event: EventInit) => {
    queue.push(event);
    wake?.();
  };
  const attach = session.call(
    'process.attach',
    { handle, follow: true },
    {
      signal: ctx.signal,
      onEvent: (name, _data, payload) => {
        if (queue.length >= MAX_QUEUED_EVENTS) return void session.close();
        const bytes = new Uint8Array(payload ?? Buffer.alloc(0));
        if (name === 'stdout') push(message({ case: 'data', value: { output: { case: 'stdout', value: bytes } } }));
        else if (name === 'stderr') push(message({ case: 'data', value: { output: { case: 'stderr', value: bytes } } }));
      },
    },
  );
  attach.then(
    ({ result }) => {
      finished = { info: result };
      wake?.();
    },
    (error: unknown) => {
      finished = { error };
      wake?.();
    },
  );
  const interval = Number.parseInt(ctx.requestHeader.get('keepalive-ping-interval') ?? '', 10);
  const keepaliveMs = (Number.isFinite(interval) && interval > 0 ? interval : DEFAULT_KEEPALIVE_SECONDS) * 1000;
  const keepalive = setInterval(() => push(message({ case: 'keepalive', value: {} })), keepaliveMs);
  try {
    for (;;) {
      const next = queue.shift();
      if (next) {
        yield next;
        continue;
      }
      if (finished) break;
      await new Promise<void>((resolve) => (wake = resolve));
      wake = undefined;
    }
  } finally {
    clearInterval(keepalive);
  }
  if (finished.error !== undefined) throw finished.error;
  yield message({ case: 'end', value: endOf(finished.info!) });
}

/** envd's end event: a normal exit's code, or -1 and `signal: ...` for a process ended by a signal. */
function endOf(info: WarrenProcess): { exitCode: number; exited: boolean; status: string; error?: string } {
  if (info.exitCode !== null) return { exitCode: info.exitCode, exited: true, status: `exit status ${info.exitCode}` };
  const signal = (info.signal ?? 'SIGKILL').replace(/^SIG/, '').toLowerCase();
  const status = `signal: ${signal === 'kill' ? 'killed' : signal === 'term' ? 'terminated' : signal}`;
  return { exitCode: -1, exited: false, status, ...(info.timedOut && { error: 'the process ran past its timeout and was killed' }) };
}

type EntryInit = Omit<EntryInfo, '$typeName' | 'modifiedTime'> & { modifiedTime: ReturnType<typeof timestampFromMs> };

/** envd's EntryInfo of one path, from `fs.stat` (a link described as itself). */
async function entryAt(session: DaemonSession, path: string): Promise<EntryInit> {
  const { result } = await session.call('fs.stat', { path, followLinks: false });
  return entry(path, result);
}

function entry(path: string, stat: Result<'fs.stat'>): EntryInit {
  return {
    name: posix.basename(path),
    type: fileType(stat.type),
    path,
    size: BigInt(stat.size),
    mode: stat.mode,
    permissions: permissions(stat.type, stat.mode),
    owner: '',
    group: '',
    modifiedTime: timestampFromMs(Math.round(stat.mtimeMs)),
    ...(stat.linkTarget !== undefined && { symlinkTarget: stat.linkTarget }),
  };
}

function listedEntry(folder: string, e: Result<'fs.list'>['entries'][number]): EntryInit {
  const path = posix.join(folder, e.path);
  return {
    name: posix.basename(path),
    type: fileType(e.type),
    path,
    size: BigInt(e.size),
    mode: 0,
    permissions: '',
    owner: '',
    group: '',
    modifiedTime: timestampFromMs(Math.round(e.mtimeMs)),
    ...(e.linkTarget !== undefined && { symlinkTarget: e.linkTarget }),
  };
}

function fileType(type: string): FileType {
  return type === 'file' ? FileType.FILE : type === 'directory' ? FileType.DIRECTORY : type === 'symlink' ? FileType.SYMLINK : FileType.UNSPECIFIED;
}

/** `ls -l`'s mode string, e.g. `-rw-r--r--`. */
export function permissions(type: string, mode: number): string {
  const kind = type === 'directory' ? 'd' : type === 'symlink' ? 'l' : '-';
  const bits = 'rwxrwxrwx';
  let text = '';
  for (let i = 0; i < 9; i++) text += mode & (1 << (8 - i)) ? bits[i] : '-';
  return kind + text;
}
