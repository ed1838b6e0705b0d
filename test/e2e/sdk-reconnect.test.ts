import { randomBytes } from 'node:crypto';
import { mkdtemp } from 'node:fs/promises';
import { createServer } from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import { Credentials, startController, type Controller, silentLogger } from '@warren/controller';
import { ConnectionClosedError, Sandbox } from '@warren/sdk';
import { removeStateDir } from '../support/state-dir.js';

/** A port that was free a moment ago, so a restarted controller can come back on the same URL. */
async function freePort(): Promise<number> {
  const server = createServer();
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  const { port } = server.address() as { port: number };
  await new Promise((r) => server.close(r));
  return port;
}

describe('the SDK connection comes back by itself after the controller restarts', () => {
  const apiKey = `wk_test_${randomBytes(16).toString('hex')}`;
  const credentials = Credentials.inMemory(apiKey);
  let stateDir: string;
  let port: number;
  let controller: Controller;
  let sandbox: Sandbox;

  const start = () => startController({ credentials, logger: silentLogger(), config: { port, stateDir, reapIntervalMs: 60_000 } });

  beforeAll(async () => {
    stateDir = await mkdtemp(path.join(os.tmpdir(), 'warren-reconnect-'));
    port = await freePort();
    controller = await start();
    sandbox = await Sandbox.create({ baseUrl: controller.url, apiKey, reconnect: { baseDelayMs: 20, maxDelayMs: 200 } });
  });

  afterAll(async () => {
    await sandbox?.kill().catch(() => undefined);
    await controller?.close();
    await removeStateDir(stateDir);
  });

  it('a call made while the controller is down waits and then answers', async () => {
    await sandbox.files.write('before.txt', 'written before the restart');
    await controller.close();
    const pending = sandbox.files.read('before.txt');
    await new Promise((r) => setTimeout(r, 300));
    controller = await start();
    await expect(pending).resolves.toBe('written before the restart');
    expect((await sandbox.commands.run('echo after')).stdout).toBe('after\n');
  });

  it('an idempotent call in flight is repeated; a non-idempotent one fails saying it may have run', async () => {
    const idempotent = sandbox.commands.connect('no-such-handle').catch((e: unknown) => e);
    const nonIdempotent = sandbox.commands.run('sleep 2; echo late', { timeoutMs: 30_000 }).catch((e: unknown) => e);
    await new Promise((r) => setTimeout(r, 300));
    await controller.close();
    controller = await start();
    const repeated = await idempotent;
    // The repeated call reached the daemon again and got its real answer (no such handle), not a closed connection.
    expect(repeated).not.toBeInstanceOf(ConnectionClosedError);
    const failed = await nonIdempotent;
    expect(failed).toBeInstanceOf(ConnectionClosedError);
    expect((failed as Error).message).toMatch(/may or may not have run/);
    expect((failed as { isRetryable: boolean }).isRetryable).toBe(true);
  });

  it('a background process attach resumes from the last offset: every line once, in order', async () => {
    const proc = await sandbox.commands.start(['sh', '-c', 'for i in $(seq 1 40); do echo line$i; sleep 0.05; done']);
    const seen: string[] = [];
    const reading = (async () => {
      for await (const event of proc.attach()) if (event.type === 'stdout') seen.push(event.data.toString('utf8'));
    })();
    await new Promise((r) => setTimeout(r, 500));
    await controller.close();
    await new Promise((r) => setTimeout(r, 300));
    controller = await start();
    await reading;
    const lines = seen.join('').trim().split('\n');
    expect(lines).toEqual(Array.from({ length: 40 }, (_, i) => `line${i + 1}`));
  });
});
