import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import { spawn, type ChildProcess } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { mkdir, mkdtemp, realpath, rm, stat, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { build } from 'esbuild';
import { Connection, Files } from '@warren/sdk';
import { codeOf } from '../../support/files.js';

const repo = path.resolve(import.meta.dirname, '..', '..', '..');

/**
 * Reserved places reached through mounts, not names: the daemon runs (from source, bundled) in a
 * private mount namespace of its own (`unshare -m`, so nothing here touches this machine's
 * mounts) where its workspace holds bind mounts of /proc, /dev and /dev/shm, a fresh procfs, and
 * a bind of its socket folder /run/warren. None of them may be read, written or listed.
 */
describe('reserved places mounted inside the workspace', () => {
  let dir: string;
  let workspace: string;
  let child: ChildProcess;
  let connection: Connection;
  let files: Files;
  let bundle: string;

  beforeAll(async () => {
    dir = await realpath(await mkdtemp(path.join(os.tmpdir(), 'warren-reserved-mounts-')));
    workspace = path.join(dir, 'ws');
    for (const sub of ['p', 'shm', 'proc2', 'devb', 'sock']) await mkdir(path.join(workspace, sub), { recursive: true });
    await writeFile(path.join(workspace, 'plain.txt'), 'plain');
    await mkdir(path.join(dir, 'socket-folder'));
    await writeFile(path.join(dir, 'socket-folder', 'daemon-file'), 'the daemon own');
    const secret = randomBytes(32).toString('hex');
    await writeFile(path.join(dir, 'secret'), secret);
    bundle = path.join(repo, 'packages', 'agent', 'node_modules', '.warren-test', `agent-main-${process.pid}.mjs`);
    await build({
      // The daemon's main, started as the runtime's boot file starts it (packages/agent/src/boot.ts).
      stdin: {
        contents: "import { main } from './main.ts';\nmain().catch((err) => { process.stderr.write(`warren-agent: ${err.message}\\n`); process.exit(1); });\n",
        resolveDir: path.join(repo, 'packages', 'agent', 'src'),
        loader: 'ts',
      },
      outfile: bundle,
      bundle: true,
      platform: 'node',
      target: 'node20',
      format: 'esm',
      conditions: ['warren-source'],
      plugins: [
        {
          name: 'external-third-party',
          setup: (b) => b.onResolve({ filter: /^[^./]/ }, (a) => (a.path.startsWith('@warren/') ? undefined : { path: a.path, external: true })),
        },
      ],
      logLevel: 'warning',
    });
    const q = (p: string) => `'${p}'`;
    const script = [
      'set -e',
      `mount --bind /proc ${q(`${workspace}/p`)}`,
      `mount --bind /dev/shm ${q(`${workspace}/shm`)}`,
      `mount --bind /dev ${q(`${workspace}/devb`)}`,
      `mount -t proc proc ${q(`${workspace}/proc2`)}`,
      // The socket folder as in a container: a mount at /run/warren (on a private /run).
      'mount -t tmpfs tmpfs /run',
      'mkdir /run/warren',
      `mount --bind ${q(`${dir}/socket-folder`)} /run/warren`,
      `mount --bind /run/warren ${q(`${workspace}/sock`)}`,
      `exec ${q(process.execPath)} ${q(bundle)} --socket ${q(`${dir}/agent.sock`)} --secret-file ${q(`${dir}/secret`)} --root ${q(workspace)} --home ${q(workspace)}`,
    ].join('\n');
    child = spawn('unshare', ['--mount', '--propagation', 'private', 'sh', '-c', script], { stdio: ['ignore', 'pipe', 'pipe'] });
    let output = '';
    child.stdout!.on('data', (c: Buffer) => (output += c.toString()));
    child.stderr!.on('data', (c: Buffer) => (output += c.toString()));
    await new Promise<void>((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error(`the agent did not start in its mount namespace: ${output}`)), 15_000);
      child.stdout!.on('data', () => {
        if (output.includes('listening')) {
          clearTimeout(timer);
          resolve();
        }
      });
      child.once('exit', (code) => {
        clearTimeout(timer);
        reject(new Error(`unshare exited with ${code}: ${output}`));
      });
    });
    connection = await Connection.open(`ws+unix://${dir}/agent.sock:/`, secret);
    files = new Files(() => connection);
  }, 60_000);

  afterAll(async () => {
    connection?.close();
    if (child && child.exitCode === null) {
      const exited = new Promise((resolve) => child.once('exit', resolve));
      child.kill('SIGKILL');
      await exited;
    }
    await rm(bundle, { force: true });
    await rm(dir, { recursive: true, force: true });
  });

  it('reads, writes and walks the workspace as usual', async () => {
    expect(await files.read('plain.txt')).toBe('plain');
    await files.write('new.txt', 'new');
    expect(await files.read('new.txt')).toBe('new');
  });

  it.each([
    ['a bind mount of /proc', 'p/self/environ'],
    ['a bind mount of /proc', 'p/1/status'],
    ['a bind mount of /proc', 'p'],
    ['a fresh procfs', 'proc2/self/environ'],
    ['a fresh procfs', 'proc2'],
    ['a bind mount of /dev', 'devb/null'],
    ['a bind mount of /dev/shm', 'shm'],
    ['a bind mount of the socket folder', 'sock/daemon-file'],
    ['a bind mount of the socket folder', 'sock'],
  ])('refuses %s (%s) for reads, writes and walks', async (_label, place) => {
    expect(await codeOf(files.read(place))).toBe('PATH_NOT_IN_SANDBOX');
    expect(await codeOf(files.stat(place))).toBe('PATH_NOT_IN_SANDBOX');
    expect(await codeOf(files.list(place))).toBe('PATH_NOT_IN_SANDBOX');
    expect(await codeOf(files.write(`${place}/x`, 'x'))).toBe('PATH_NOT_IN_SANDBOX');
    expect(await codeOf(files.copy('plain.txt', `${place}/copy`))).toBe('PATH_NOT_IN_SANDBOX');
    expect(await codeOf(files.copy(place, 'copied'))).toBe('PATH_NOT_IN_SANDBOX');
    expect(await codeOf(files.download(place))).toBe('PATH_NOT_IN_SANDBOX');
  });

  it('leaves the mounts out of listings, globs and downloads of the workspace', async () => {
    const listed = await files.list('.', { recursive: true });
    expect(listed.entries.map((e) => e.path).sort()).toEqual(['new.txt', 'plain.txt']);
    expect(await files.glob('.', '**/*', { includeDirectories: true })).toEqual(['new.txt', 'plain.txt']);
    const down = await files.download('.');
    expect(down.entries.map((e) => e.name).sort()).toEqual(['new.txt', 'plain.txt']);
  });

  it('the mounts were really there, in the daemon namespace only', async () => {
    // In this (the test's) namespace the folders are empty and on the workspace's own device.
    expect((await stat(path.join(workspace, 'p'))).dev).toBe((await stat(workspace)).dev);
    // In the daemon's, a command sees them (commands are not bound by the file policy).
    const { Commands } = await import('@warren/sdk');
    const run = await new Commands(() => connection).run(`test -r ${workspace}/p/self/status && test -e ${workspace}/sock/daemon-file && echo mounted`);
    expect(run.stdout.trim()).toBe('mounted');
  });
});
