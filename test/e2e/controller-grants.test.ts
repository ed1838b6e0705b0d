import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import Docker from 'dockerode';
import { Sandbox } from '@warren/sdk';
import { startTestController, type TestController } from '../support/fixtures.js';

// The sandbox's base policy lives in a label; each connection's grant reaches the daemon in the
// x-warren-policy header; derived tokens carry a narrower, signed grant; the relay refuses calls
// the grant does not allow before they reach the daemon.
describe('file policy grants and derived tokens', () => {
  let warren: TestController;
  let sandbox: Sandbox;
  const workers: Sandbox[] = [];

  beforeAll(async () => {
    warren = await startTestController();
    sandbox = await Sandbox.create({ baseUrl: warren.url, apiKey: warren.apiKey, policy: { root: '/workspace', readOnly: false } });
    await sandbox.commands.run([
      'sh',
      '-c',
      'mkdir -p /workspace/src /workspace/out && printf "code" > /workspace/src/a.py && printf "s3cret" > /workspace/secret.txt',
    ]);
  });
  afterAll(async () => {
    for (const w of workers) w.close();
    await sandbox?.kill().catch(() => undefined);
    await warren?.[Symbol.asyncDispose]();
  });

  const connectWith = async (token: string) => {
    const worker = await Sandbox.connect(sandbox.id, { baseUrl: warren.url, token });
    workers.push(worker);
    return worker;
  };

  it('keeps the base policy in a container label', async () => {
    const containerId = warren.controller.sandboxes.record(sandbox.id).containerId;
    const { Config } = await new Docker().getContainer(containerId).inspect();
    expect(JSON.parse(Config.Labels['warren.policy']!)).toEqual({ root: '/workspace', readOnly: false });
  });

  it('a derived token reads and writes only what it was given, and runs nothing without allowExec', async () => {
    const { token, grant } = await sandbox.deriveToken({ allowRead: ['/workspace/src'], allowWrite: ['/workspace/out'] });
    expect(token).toMatch(/^wsd_/);
    expect(grant).toMatchObject({ allowExec: false, policy: { restrict: { read: ['/workspace/src'], write: ['/workspace/out'] } } });
    const worker = await connectWith(token);
    expect(await worker.files.read('/workspace/src/a.py')).toBe('code');
    await expect(worker.files.read('/workspace/secret.txt')).rejects.toMatchObject({ code: expect.stringMatching(/^(PATH_NOT_IN_SANDBOX|FORBIDDEN)$/) });
    await worker.files.write('/workspace/out/result.txt', 'done');
    await expect(worker.files.write('/workspace/src/a.py', 'overwritten')).rejects.toMatchObject({
      code: expect.stringMatching(/^(PATH_NOT_WRITABLE|PATH_NOT_IN_SANDBOX|FORBIDDEN)$/),
    });
    // The relay refuses exec for this grant: the frame never reaches the daemon.
    await expect(worker.commands.run('cat /workspace/secret.txt')).rejects.toMatchObject({ code: 'FORBIDDEN', message: expect.stringContaining('allowExec') });
    expect((await sandbox.commands.run('cat /workspace/src/a.py /workspace/out/result.txt')).stdout).toBe('codedone');
  });

  it('a read-only derived token cannot write anywhere: refused at the relay', async () => {
    const { token } = await sandbox.deriveToken({ inherit: true, readonly: true });
    const worker = await connectWith(token);
    expect(await worker.files.read('/workspace/secret.txt')).toBe('s3cret');
    await expect(worker.files.write('/workspace/out/x.txt', 'no')).rejects.toMatchObject({ code: 'FORBIDDEN', message: expect.stringContaining('read-only') });
  });

  it('derive only narrows: a wider request from a derived token is PERMISSION_ESCALATION', async () => {
    const { token } = await sandbox.deriveToken({ allowRead: ['/workspace/src'] });
    const derive = (body: unknown) =>
      fetch(`${warren.url}/v1/sandboxes/${sandbox.id}/derive`, {
        method: 'POST',
        headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json' },
        body: JSON.stringify(body),
      });
    for (const body of [{ allowRead: ['/workspace'] }, { allowWrite: ['/workspace/src'] }, { allowExec: true }, { readonly: false }]) {
      const res = await derive(body);
      expect({ body, status: res.status }).toEqual({ body, status: 403 });
      expect(((await res.json()) as { error: { code: string } }).error.code).toBe('PERMISSION_ESCALATION');
    }
    const narrower = await derive({ allowRead: ['/workspace/src/a.py'] });
    expect(narrower.status).toBe(201);
    const bad = await derive({ allowRead: 42 });
    expect(bad.status).toBe(400);
  });

  it('allowExec passes exec through, and a derived token with a ttl stops working when it ends', async () => {
    // A ttl a loaded machine surely connects and runs within; then its end is waited out by the
    // expiry the controller (same clock: it runs in this process) put in the token.
    const { token, expiresAt } = await sandbox.deriveToken({ inherit: true, allowExec: true, ttlSeconds: 10 });
    const worker = await connectWith(token);
    expect((await worker.commands.run('echo hi')).stdout).toBe('hi\n');
    worker.close();
    await new Promise((r) => setTimeout(r, Math.max(0, Date.parse(expiresAt!) - Date.now()) + 100));
    await expect(Sandbox.connect(sandbox.id, { baseUrl: warren.url, token })).rejects.toMatchObject({ code: 'UNAUTHORIZED' });
  });

  it('a read-only base policy applies to the API key and the sandbox token too', async () => {
    await using ro = await Sandbox.create({ baseUrl: warren.url, apiKey: warren.apiKey, policy: { root: '/workspace', readOnly: true } });
    await expect(ro.files.write('/workspace/x.txt', 'no')).rejects.toMatchObject({ code: 'FORBIDDEN' });
    // exec is not bound by the file policy: the shell can write (the container is the boundary).
    expect((await ro.commands.run(['sh', '-c', 'echo yes > /workspace/x.txt && cat /workspace/x.txt'])).stdout).toBe('yes\n');
  });

  it("serves the daemon's audit log over REST: every call, with its outcome, pageable with since", async () => {
    const get = (query: string, token = warren.apiKey) =>
      fetch(`${warren.url}/v1/sandboxes/${sandbox.id}/audit${query}`, { headers: { authorization: `Bearer ${token}` } });
    const res = await get('');
    expect(res.status).toBe(200);
    const log = (await res.json()) as { entries: { seq: number; method: string; paths: string[]; outcome: string }[]; lastSeq: number; dropped: boolean };
    expect(log.dropped).toBe(false);
    expect(log.entries).toEqual(
      expect.arrayContaining([
        expect.objectContaining({ method: 'fs.read', paths: ['/workspace/src/a.py'], outcome: 'ok' }),
        expect.objectContaining({ method: 'fs.write', paths: ['/workspace/out/result.txt'], outcome: 'ok' }),
        expect.objectContaining({ method: 'fs.read', paths: ['/workspace/secret.txt'], outcome: expect.not.stringMatching(/^ok$/) }),
      ]),
    );
    const later = (await (await get(`?since=${log.lastSeq}`, sandbox.token)).json()) as { entries: { seq: number }[] };
    expect(later.entries.every((e) => e.seq > log.lastSeq)).toBe(true);
    expect((await get('?since=-1')).status).toBe(400);
  });
});
