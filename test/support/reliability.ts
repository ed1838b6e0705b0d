// Helpers of the reliability suite (test/e2e/reliability-*.test.ts): a controller in its own
// process (so its memory can be measured and it can be SIGKILLed), a raw protocol client that
// can misbehave, and small probes.
import { spawn, type ChildProcess } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { rmSync } from 'node:fs';
import { chown, mkdtemp, readFile } from 'node:fs/promises';
import { createServer } from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { createInterface } from 'node:readline';
import { build } from 'esbuild';
import { decodeFrame, encodeFrame, PROTOCOL_VERSION, type FrameHeader } from '@warren/protocol';
import { WarrenError } from '@warren/sdk';
import { WebSocket } from 'ws';
import { until as waitUntil } from './wait.js';
import { removeStateDir } from './state-dir.js';

const repo = path.resolve(import.meta.dirname, '..', '..');
// Inside the controller package, so its dependencies resolve from its node_modules. A name of
// its own: other test files bundle the same entry concurrently.
const entryDir = path.join(repo, 'packages', 'controller', 'node_modules', '.warren-test');

let bundled: Promise<string> | undefined;

/** Bundles test/support/controller-entry.ts from source, once per test file. */
function bundleEntry(): Promise<string> {
  bundled ??= (async () => {
    const outfile = path.join(entryDir, `controller-entry-reliability-${process.pid}.mjs`);
    await build({
      entryPoints: [path.join(repo, 'test', 'support', 'controller-entry.ts')],
      outfile,
      bundle: true,
      platform: 'node',
      target: 'node20',
      format: 'esm',
      conditions: ['warren-source'],
      // Warren's own packages are bundled from source; third-party ones load from node_modules.
      plugins: [
        {
          name: 'external-third-party',
          setup(b) {
            b.onResolve({ filter: /^[^./]/ }, (args) => (args.path.startsWith('@warren/') ? undefined : { path: args.path, external: true }));
          },
        },
      ],
      logLevel: 'warning',
    });
    process.once('exit', () => rmSync(outfile, { force: true }));
    return outfile;
  })();
  return bundled;
}

export async function freePort(): Promise<number> {
  const server = createServer();
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as { port: number };
  await new Promise((resolve) => server.close(resolve));
  return port;
}

/** Who a {@link ControllerProcess} runs as, when not as the test's own user. */
export interface ControllerUser {
  uid: number;
  gid: number;
  /** Supplementary groups, e.g. the `docker` group's id. */
  groups: number[];
}

/** A controller in its own process: its pid for /proc, SIGKILL-able, restartable on the same port and state. */
export class ControllerProcess {
  private constructor(
    readonly child: ChildProcess,
    readonly url: string,
    readonly apiKey: string,
    readonly env: Record<string, string>,
  ) {}

  /**
   * Starts a controller with a fresh state folder and API key, or with `env` from an earlier
   * one (same port, state folder and key: a restart). With `user`, it runs as that uid, gid and
   * supplementary groups (`setpriv`), its state folder handed to it: a non-root controller.
   * A controller that exits before it listens rejects with the end of what it wrote to stderr.
   */
  static async start(extraEnv: Record<string, string> = {}, previous?: ControllerProcess, options: { user?: ControllerUser } = {}): Promise<ControllerProcess> {
    const entry = await bundleEntry();
    const env = previous
      ? previous.env
      : {
          WARREN_STATE_DIR: extraEnv.WARREN_STATE_DIR ?? (await mkdtemp(path.join(os.tmpdir(), 'warren-reliability-'))),
          WARREN_API_KEY: `wk_test_${randomBytes(16).toString('hex')}`,
          WARREN_PORT: String(await freePort()),
          WARREN_AGENT_BUNDLE: path.join(repo, 'packages', 'agent', 'dist', 'warren-agent.mjs'),
          ...extraEnv,
        };
    const user = options.user;
    if (user && !previous) await chown(env.WARREN_STATE_DIR!, user.uid, user.gid);
    const command: [string, string[]] = user
      ? [
          'setpriv',
          [
            `--reuid=${user.uid}`,
            `--regid=${user.gid}`,
            ...(user.groups.length > 0 ? [`--groups=${user.groups.join(',')}`] : ['--clear-groups']),
            '--',
            process.execPath,
            entry,
          ],
        ]
      : [process.execPath, [entry]];
    const child = spawn(command[0], command[1], {
      env: { ...process.env, ...env, ...(user ? { HOME: env.WARREN_STATE_DIR! } : {}) },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let stderr = '';
    child.stderr.on('data', (chunk: Buffer) => {
      process.stderr.write(chunk);
      stderr = (stderr + chunk.toString('utf8')).slice(-4000);
    });
    const line = await new Promise<string>((resolve, reject) => {
      createInterface({ input: child.stdout }).once('line', resolve);
      child.once('exit', (code) => reject(new Error(`the controller exited with ${code} before it listened: ${stderr.trim()}`)));
    });
    return new ControllerProcess(child, (JSON.parse(line) as { url: string }).url, env.WARREN_API_KEY!, env);
  }

  get pid(): number {
    return this.child.pid!;
  }

  get options(): { baseUrl: string; apiKey: string } {
    return { baseUrl: this.url, apiKey: this.apiKey };
  }

  /** Resident memory of the controller process, in bytes. */
  rssBytes(): Promise<number> {
    return processRssBytes(this.pid);
  }

  async stop(signal: NodeJS.Signals = 'SIGTERM'): Promise<void> {
    if (this.child.exitCode !== null || this.child.signalCode !== null) return;
    const exited = new Promise((resolve) => this.child.once('exit', resolve));
    this.child.kill(signal);
    await exited;
  }

  /** Stops the process and removes its state folder (its sandboxes must be killed before). */
  async dispose(): Promise<void> {
    await this.stop('SIGKILL');
    await removeStateDir(this.env.WARREN_STATE_DIR!);
  }
}

/** VmRSS of a process, from /proc. */
export async function processRssBytes(pid: number): Promise<number> {
  const status = await readFile(`/proc/${pid}/status`, 'utf8');
  return Number(/VmRSS:\s+(\d+)/.exec(status)?.[1] ?? NaN) * 1024;
}

/** A decoded frame as the raw client saw it. */
export interface SeenFrame {
  header: FrameHeader;
  payloadBytes: number;
}

/**
 * A client that speaks the binary frame protocol by hand, so it can send what the SDK never
 * would: malformed frames, unknown methods, reused ids. Frames it receives are queued and
 * matched by {@link RawClient.next}.
 */
export class RawClient {
  private readonly queue: SeenFrame[] = [];
  private readonly waiters: { match: (f: SeenFrame) => boolean; resolve: (f: SeenFrame) => void }[] = [];
  readonly closed: Promise<{ code: number; reason: string }>;
  /** Bytes of output events received, per request id. */
  readonly eventBytes = new Map<string, number>();

  private constructor(readonly ws: WebSocket) {
    this.closed = new Promise((resolve) => ws.once('close', (code, reason) => resolve({ code, reason: reason.toString() })));
    ws.on('error', () => undefined);
    ws.on('message', (data: Buffer) => {
      let frame: SeenFrame;
      try {
        const decoded = decodeFrame(data);
        frame = { header: decoded.header, payloadBytes: decoded.payload?.length ?? 0 };
      } catch {
        return;
      }
      if (frame.header.type === 'evt') {
        const key = String(frame.header.id);
        this.eventBytes.set(key, (this.eventBytes.get(key) ?? 0) + frame.payloadBytes);
        if (frame.header.event === 'stdout' || frame.header.event === 'stderr') return; // counted, not queued
      }
      const i = this.waiters.findIndex((w) => w.match(frame));
      if (i >= 0) this.waiters.splice(i, 1)[0]!.resolve(frame);
      else this.queue.push(frame);
    });
  }

  /** Connects to a sandbox through the controller and, unless told not to, completes the hello. */
  static async open(baseUrl: string, sandboxId: string, credential: string, options: { hello?: boolean } = {}): Promise<RawClient> {
    const ws = new WebSocket(`${baseUrl.replace(/^http/, 'ws')}/v1/sandboxes/${sandboxId}/connect`, {
      headers: { authorization: `Bearer ${credential}` },
      perMessageDeflate: false,
      maxPayload: 256 * 1024 * 1024,
    });
    await new Promise<void>((resolve, reject) => {
      ws.once('open', resolve);
      ws.once('error', reject);
      ws.once('unexpected-response', (_req, res) => reject(new Error(`upgrade refused: HTTP ${res.statusCode}`)));
    });
    const client = new RawClient(ws);
    if (options.hello !== false) {
      client.send({ type: 'hello', protocolVersion: PROTOCOL_VERSION, client: 'reliability-raw' });
      const welcome = await client.next(() => true);
      if (welcome.header.type !== 'welcome') throw new Error(`expected welcome, got ${JSON.stringify(welcome.header)}`);
    }
    return client;
  }

  /** Sends a frame header (encoded), or raw bytes / text exactly as given. */
  send(frame: FrameHeader | Buffer | string, payload?: Uint8Array): void {
    if (typeof frame === 'string') this.ws.send(frame);
    else if (Buffer.isBuffer(frame)) this.ws.send(frame, { binary: true });
    else this.ws.send(encodeFrame(frame, payload), { binary: true });
  }

  /** Sends a header given as JSON text, exactly (for keys like `__proto__` that objects cannot hold). */
  sendJson(json: string, payload?: Uint8Array): void {
    const body = Buffer.from(json, 'utf8');
    const prefix = Buffer.alloc(4);
    prefix.writeUInt32BE(body.length, 0);
    this.ws.send(Buffer.concat([prefix, body, ...(payload ? [Buffer.from(payload)] : [])]), { binary: true });
  }

  /** The next frame (queued or arriving) that matches. */
  next(match: (f: SeenFrame) => boolean, timeoutMs = 30_000): Promise<SeenFrame> {
    const i = this.queue.findIndex(match);
    if (i >= 0) return Promise.resolve(this.queue.splice(i, 1)[0]!);
    return new Promise((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error(`no matching frame within ${timeoutMs} ms`)), timeoutMs);
      this.waiters.push({
        match,
        resolve: (f) => {
          clearTimeout(timer);
          resolve(f);
        },
      });
    });
  }

  /** The final answer (`res` or `err`) to a request id. */
  answer(id: string | number | null, timeoutMs?: number): Promise<FrameHeader> {
    return this.next((f) => (f.header.type === 'res' || f.header.type === 'err') && f.header.id === id, timeoutMs).then((f) => f.header);
  }

  /** The final answer to a request that carried no readable id (`err` with id null). */
  anonymousError(timeoutMs?: number): Promise<FrameHeader> {
    return this.answer(null, timeoutMs);
  }

  close(): void {
    this.ws.terminate();
  }
}

/** The wire code of an error frame, or 'ok' for a result. */
export function outcomeOf(header: FrameHeader): string {
  if (header.type === 'res') return 'ok';
  if (header.type === 'err') return header.error.code;
  return `unexpected ${header.type}`;
}

/** Settles a call to 'ok' or its WarrenError code; anything else that was thrown is a test failure. */
export async function typedOutcome(call: Promise<unknown>): Promise<string> {
  try {
    await call;
    return 'ok';
  } catch (err) {
    if (err instanceof WarrenError) return err.code;
    return `UNTYPED: ${err instanceof Error ? `${err.name}: ${err.message}` : String(err)}`;
  }
}

/** Like {@link waitUntil}, but a probe that throws counts as "not yet". */
export function until<T>(what: string, probe: () => Promise<T | undefined>, timeoutMs = 30_000, everyMs = 200): Promise<T> {
  return waitUntil(what, () => probe().catch(() => undefined), timeoutMs, everyMs);
}

export const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

export const MiB = 1024 * 1024;
