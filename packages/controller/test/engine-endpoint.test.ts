import { createHash } from 'node:crypto';
import { mkdir, mkdtemp, rm, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from '@jest/globals';
import { resolveEngine } from '../src/docker/engine-endpoint.js';

/** A Docker config folder as the docker command writes it: config.json and contexts/{meta,tls}/<sha256 of the name>. */
async function context(dir: string, name: string, endpoint: Record<string, unknown>, tls?: Record<string, string>) {
  const id = createHash('sha256').update(name).digest('hex');
  await mkdir(path.join(dir, 'contexts', 'meta', id), { recursive: true });
  await writeFile(path.join(dir, 'contexts', 'meta', id, 'meta.json'), JSON.stringify({ Name: name, Metadata: {}, Endpoints: { docker: endpoint } }));
  if (tls) {
    await mkdir(path.join(dir, 'contexts', 'tls', id, 'docker'), { recursive: true });
    for (const [file, text] of Object.entries(tls)) await writeFile(path.join(dir, 'contexts', 'tls', id, 'docker', file), text);
  }
}

describe('finding the engine as the docker command does', () => {
  let dir: string;
  beforeEach(async () => {
    dir = await mkdtemp(path.join(os.tmpdir(), 'warren-docker-config-'));
  });
  afterEach(async () => rm(dir, { recursive: true, force: true }));

  it('DOCKER_HOST wins over any context and is left to docker-modem (with its TLS variables)', async () => {
    await writeFile(path.join(dir, 'config.json'), JSON.stringify({ currentContext: 'rootless' }));
    expect(resolveEngine({ DOCKER_HOST: 'tcp://10.0.0.2:2376', DOCKER_CONFIG: dir })).toEqual({
      options: {},
      address: 'tcp://10.0.0.2:2376',
      source: 'DOCKER_HOST',
    });
  });

  it("follows the current context (rootless Docker's unix socket) from config.json", async () => {
    await writeFile(path.join(dir, 'config.json'), JSON.stringify({ currentContext: 'rootless' }));
    await context(dir, 'rootless', { Host: 'unix:///run/user/1001/docker.sock', SkipTLSVerify: false });
    expect(resolveEngine({ DOCKER_CONFIG: dir })).toEqual({
      options: { socketPath: '/run/user/1001/docker.sock' },
      address: 'unix:///run/user/1001/docker.sock',
      source: 'context rootless',
    });
  });

  it('DOCKER_CONTEXT overrides config.json; a TCP context brings its TLS files', async () => {
    await writeFile(path.join(dir, 'config.json'), JSON.stringify({ currentContext: 'default' }));
    await context(dir, 'remote', { Host: 'tcp://build-box.internal:2376', SkipTLSVerify: false }, { 'ca.pem': 'CA', 'cert.pem': 'CERT', 'key.pem': 'KEY' });
    const engine = resolveEngine({ DOCKER_CONFIG: dir, DOCKER_CONTEXT: 'remote' });
    expect(engine.address).toBe('tcp://build-box.internal:2376 (TLS)');
    expect(engine.source).toBe('context remote');
    expect(engine.options).toMatchObject({
      protocol: 'https',
      host: 'build-box.internal',
      port: '2376',
      ca: Buffer.from('CA'),
      cert: Buffer.from('CERT'),
      key: Buffer.from('KEY'),
    });
    expect(engine.options).not.toHaveProperty('rejectUnauthorized');
  });

  it('an ssh context gives user, host and port; the default context and no config give the default socket', async () => {
    await context(dir, 'far', { Host: 'ssh://deploy@far.internal:2222' });
    expect(resolveEngine({ DOCKER_CONFIG: dir, DOCKER_CONTEXT: 'far' })).toMatchObject({
      options: { protocol: 'ssh', host: 'far.internal', port: '2222', username: 'deploy' },
      address: 'ssh://deploy@far.internal:2222',
    });
    expect(resolveEngine({ DOCKER_CONFIG: dir, DOCKER_CONTEXT: 'default' }).source).toBe('the default socket');
    expect(resolveEngine({ DOCKER_CONFIG: path.join(dir, 'absent') }).source).toBe('the default socket');
  });

  it('a named context that cannot be read, or an endpoint of another scheme, is an error that names it', async () => {
    expect(() => resolveEngine({ DOCKER_CONFIG: dir, DOCKER_CONTEXT: 'gone' })).toThrow(/Docker context 'gone' cannot be read/);
    await context(dir, 'pipe', { Host: 'npipe:////./pipe/docker_engine' });
    expect(() => resolveEngine({ DOCKER_CONFIG: dir, DOCKER_CONTEXT: 'pipe' })).toThrow(/scheme Warren does not speak/);
  });
});

describe('the runtime loader, per architecture', () => {
  it("takes whatever ld-linux ldd lists (x86-64 or arm64) as the runtime's one loader, and the rest as libraries", async () => {
    const { librariesFromLdd } = await import('../src/runtime.js');
    const x64 = librariesFromLdd(
      '\tlinux-vdso.so.1 (0x00007ffc2a1f0000)\n\tlibc.so.6 => /lib/x86_64-linux-gnu/libc.so.6 (0x00007f2b1c000000)\n\t/lib64/ld-linux-x86-64.so.2 (0x00007f2b1c400000)\n',
    );
    expect(x64).toEqual([
      { name: 'lib/libc.so.6', source: '/lib/x86_64-linux-gnu/libc.so.6', mode: 0o644 },
      { name: 'ld-linux.so', source: '/lib64/ld-linux-x86-64.so.2', mode: 0o755 },
    ]);
    const arm64 = librariesFromLdd(
      '\tlinux-vdso.so.1 (0x0000ffff9c9f0000)\n\tlibstdc++.so.6 => /lib/aarch64-linux-gnu/libstdc++.so.6 (0x0000ffff9c600000)\n\t/lib/ld-linux-aarch64.so.1 (0x0000ffff9c9b0000)\n',
    );
    expect(arm64).toEqual([
      { name: 'lib/libstdc++.so.6', source: '/lib/aarch64-linux-gnu/libstdc++.so.6', mode: 0o644 },
      { name: 'ld-linux.so', source: '/lib/ld-linux-aarch64.so.1', mode: 0o755 },
    ]);
  });

  it("names the engine's architecture as Node does, so a mismatch is caught at start", async () => {
    const { nodeArch } = await import('../src/runtime.js');
    expect(nodeArch('x86_64')).toBe('x64');
    expect(nodeArch('aarch64')).toBe('arm64');
    expect(nodeArch('riscv64')).toBe('riscv64');
  });
});
