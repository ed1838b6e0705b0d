import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import type Docker from 'dockerode';
import { pack } from 'tar-stream';
import { freePort } from './reliability.js';

/** True when the engine has an image of that name or id. */
export async function imagePresent(docker: Docker, name: string): Promise<boolean> {
  return docker
    .getImage(name)
    .inspect()
    .then(
      () => true,
      () => false,
    );
}

/** Debian's registry (`apt-get install docker-registry`; scripts/lib/common.sh ensure_registry). */
export const REGISTRY_BIN = '/usr/bin/docker-registry';

/** A Docker registry on a free loopback port with its own storage folder, for a test to push to and pull from. */
export interface TestRegistry extends AsyncDisposable {
  /** `127.0.0.1:<port>`: the registry host part of an image reference. */
  host: string;
  /** How many requests for blobs and manifests the registry has served (read from its access log). */
  requests(): number;
}

/**
 * Starts a registry on 127.0.0.1:<free port> storing in a temporary folder; dispose stops it and
 * removes the folder. The engine treats loopback registries as insecure (plain HTTP) by default.
 *
 * @example
 * await using registry = await startRegistry();
 * await pushImage(docker, `${registry.host}/team/app:1`);
 */
export async function startRegistry(): Promise<TestRegistry> {
  const dir = await mkdtemp(path.join(os.tmpdir(), 'warren-registry-'));
  const port = await freePort();
  const config = path.join(dir, 'config.yml');
  await writeFile(
    config,
    [
      'version: 0.1',
      'log: { level: info, accesslog: { disabled: false } }',
      'storage:',
      `  filesystem: { rootdirectory: ${path.join(dir, 'data')} }`,
      '  delete: { enabled: true }',
      'http:',
      `  addr: 127.0.0.1:${port}`,
      '',
    ].join('\n'),
  );
  const child: ChildProcess = spawn(REGISTRY_BIN, ['serve', config], { stdio: ['ignore', 'pipe', 'pipe'] });
  let log = '';
  child.stdout?.on('data', (c: Buffer) => (log += c.toString('utf8')));
  child.stderr?.on('data', (c: Buffer) => (log += c.toString('utf8')));
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
  const host = `127.0.0.1:${port}`;
  const deadline = Date.now() + 15_000;
  for (;;) {
    const ok = await fetch(`http://${host}/v2/`).then(
      (r) => r.status === 200,
      () => false,
    );
    if (ok) break;
    if (child.exitCode !== null || Date.now() > deadline) {
      child.kill('SIGKILL');
      await rm(dir, { recursive: true, force: true });
      throw new Error(`The test registry did not start on ${host}: ${log.slice(-2000)}`);
    }
    await new Promise((r) => setTimeout(r, 100));
  }
  return {
    host,
    requests: () => (log.match(/"(?:GET|HEAD) \/v2\/[^"]*\/(?:manifests|blobs)\//g) ?? []).length,
    [Symbol.asyncDispose]: async () => {
      child.kill('SIGTERM');
      await Promise.race([exited, new Promise((r) => setTimeout(r, 5000))]);
      if (child.exitCode === null) child.kill('SIGKILL');
      await rm(dir, { recursive: true, force: true });
    },
  };
}

/** Follows one of the engine's progress streams to its end; an `error` line rejects. */
export async function followEngine(
  docker: Docker,
  stream: NodeJS.ReadableStream,
  onLine: (line: { stream?: string; status?: string }) => void = () => undefined,
) {
  await new Promise<void>((resolve, reject) => {
    docker.modem.followProgress(
      stream,
      (err: Error | null) => (err ? reject(err) : resolve()),
      (line: { error?: string; stream?: string; status?: string }) => {
        if (line.error) reject(new Error(line.error));
        else onLine(line);
      },
    );
  });
}

/** Pushes a local image to the registry its name names. */
export async function pushImage(docker: Docker, name: string): Promise<void> {
  // The engine wants an X-Registry-Auth header even for a registry without auth: an empty one.
  // Without a callback, push answers a promise of the stream (its types say otherwise).
  const pushing = docker.getImage(name).push({ authconfig: {} } as never) as unknown as Promise<NodeJS.ReadableStream>;
  await followEngine(docker, await pushing);
}

/**
 * Builds an image FROM scratch holding one file of `bytes` random bytes (so its layer does not
 * compress), labelled `label`, named `name`.
 */
export async function buildRandomImage(docker: Docker, name: string, bytes: number, label: Record<string, string>): Promise<void> {
  const { randomBytes } = await import('node:crypto');
  const p = pack();
  p.entry({ name: 'Dockerfile' }, 'FROM scratch\nCOPY blob /blob\n');
  p.entry({ name: 'blob' }, randomBytes(bytes));
  p.finalize();
  await followEngine(
    docker,
    await docker.buildImage(
      p as unknown as NodeJS.ReadableStream,
      { t: name, labels: label, rm: true, forcerm: true, version: '1' } as Docker.ImageBuildOptions,
    ),
  );
}
