import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import { Sandbox } from '@warren/sdk';
import { startTestController, type TestController } from '../support/fixtures.js';
import { codeOf } from '../support/files.js';

/**
 * A real sandbox whose policy root is `/`: the daemon's environment (/proc/self/environ), its
 * socket folder (/run/warren), its runtime (/opt/warren) and the kernel's file systems stay out
 * of the file API's reach, while the rest of the container is readable and writable.
 */
describe('reserved places in a real sandbox with a policy root of /', () => {
  let warren: TestController;
  let sandbox: Sandbox;

  beforeAll(async () => {
    warren = await startTestController();
    sandbox = await Sandbox.create({ baseUrl: warren.url, apiKey: warren.apiKey, policy: { root: '/' } });
  }, 60_000);
  afterAll(async () => {
    await sandbox?.kill().catch(() => undefined);
    await warren?.[Symbol.asyncDispose]();
  });

  it('refuses a policy root in a reserved folder when the sandbox is created', async () => {
    for (const root of ['/proc', '/run/warren', '/opt/warren/lib', '/dev/shm']) {
      expect(await codeOf(Sandbox.create({ baseUrl: warren.url, apiKey: warren.apiKey, policy: { root } }))).toBe('INVALID_PARAMS');
    }
  });

  it.each([
    '/proc/self/environ',
    '/proc/1/environ',
    '/proc/self/mem',
    '/sys/fs/cgroup',
    '/dev/shm',
    '/dev/null',
    '/run/warren',
    '/run/warren/agent.sock',
    '/opt/warren/warren-agent.mjs',
    '/opt/warren/node',
  ])('%s: PATH_NOT_IN_SANDBOX for reads, writes, listings and downloads', async (place) => {
    expect(await codeOf(sandbox.files.read(place))).toBe('PATH_NOT_IN_SANDBOX');
    expect(await codeOf(sandbox.files.stat(place))).toBe('PATH_NOT_IN_SANDBOX');
    expect(await codeOf(sandbox.files.list(place))).toBe('PATH_NOT_IN_SANDBOX');
    expect(await codeOf(sandbox.files.download(place))).toBe('PATH_NOT_IN_SANDBOX');
    expect(await codeOf(sandbox.files.write(`${place}/x`, 'x'))).toBe('PATH_NOT_IN_SANDBOX');
    expect(await codeOf(sandbox.files.copy('/etc/hostname', `${place}/x`))).toBe('PATH_NOT_IN_SANDBOX');
  });

  it('refuses links into them, and leaves them out of listings', async () => {
    await sandbox.commands.run('ln -sfn /proc/self /workspace/self && ln -sfn /opt/warren /workspace/rt && ln -sfn /run/warren /workspace/sock');
    for (const through of ['/workspace/self/environ', '/workspace/rt/warren-agent.mjs', '/workspace/sock/agent.sock']) {
      expect([through, await codeOf(sandbox.files.read(through))]).toEqual([through, 'PATH_NOT_IN_SANDBOX']);
    }
    const top = (await sandbox.files.list('/')).entries.map((e) => e.path);
    expect(top).toEqual(expect.arrayContaining(['etc', 'workspace', 'opt', 'run']));
    for (const hidden of ['proc', 'sys', 'dev']) expect(top).not.toContain(hidden);
    expect((await sandbox.files.list('/run')).entries.map((e) => e.path)).not.toContain('warren');
    expect((await sandbox.files.list('/opt')).entries.map((e) => e.path)).not.toContain('warren');
  });

  it('the rest of the container, the workspace volume included, works as before', async () => {
    await sandbox.files.write('/workspace/a.txt', 'a');
    expect(await sandbox.files.read('/workspace/a.txt')).toBe('a');
    await sandbox.files.write('/tmp/b.txt', 'b');
    expect(await sandbox.files.read('/tmp/b.txt')).toBe('b');
    expect(await sandbox.files.read('/etc/hostname')).toMatch(/\S/);
  });
});
