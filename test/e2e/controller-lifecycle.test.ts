import { readFile, stat } from 'node:fs/promises';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import Docker from 'dockerode';
import { Sandbox } from '@warren/sdk';
import { startTestController, type TestController } from '../support/fixtures.js';
import { until } from '../support/wait.js';

describe('the sandbox lifecycle over REST', () => {
  let warren: TestController;
  let sandbox: Sandbox;
  const docker = new Docker();

  beforeAll(async () => {
    warren = await startTestController();
    sandbox = await Sandbox.create({ baseUrl: warren.url, apiKey: warren.apiKey, labels: { suite: 'lifecycle', team: 'red' }, ttlSeconds: 600 });
  });
  afterAll(async () => {
    await sandbox?.kill().catch(() => undefined);
    await warren?.[Symbol.asyncDispose]();
  });

  const api = (method: string, route: string, body?: unknown) =>
    fetch(`${warren.url}${route}`, {
      method,
      headers: { authorization: `Bearer ${warren.apiKey}`, 'content-type': 'application/json' },
      body: body === undefined ? null : JSON.stringify(body),
    });

  it('gets a sandbox with its settings, and lists by label and state', async () => {
    const info = await sandbox.info();
    expect(info).toMatchObject({
      id: sandbox.id,
      state: 'running',
      labels: { suite: 'lifecycle', team: 'red' },
      settings: { network: 'none', user: '1000:1000', ttlSeconds: 600 },
    });
    const options = { baseUrl: warren.url, apiKey: warren.apiKey };
    expect((await Sandbox.list({ ...options, labels: { team: 'red' } })).map((s) => s.id)).toEqual([sandbox.id]);
    expect(await Sandbox.list({ ...options, labels: { team: 'blue' } })).toEqual([]);
    expect(await Sandbox.list({ ...options, labels: { team: 'red' }, state: 'paused' })).toEqual([]);
    const bad = await api('GET', '/v1/sandboxes?state=sleeping');
    expect(bad.status).toBe(400);
  });

  it('moves the expiry with setTimeout (milliseconds, as in E2B) and keepalive, and keeps it in the state folder', async () => {
    const before = Date.parse((await sandbox.info()).expiresAt);
    const asked = Date.now();
    const shorter = await sandbox.setTimeout(120_000);
    expect(Date.parse(shorter.expiresAt)).toBeLessThan(before);
    expect(Date.parse(shorter.expiresAt) - asked).toBeGreaterThanOrEqual(119_000);
    expect(Date.parse(shorter.expiresAt) - asked).toBeLessThanOrEqual(125_000);
    const stored = JSON.parse(await readFile(path.join(warren.controller.config.stateDir, 'records', `${sandbox.id}.json`), 'utf8')) as { expiresAt: string };
    expect(stored.expiresAt).toBe(shorter.expiresAt);
    const kept = await sandbox.keepalive();
    expect(Date.parse(kept.expiresAt)).toBeGreaterThan(Date.parse(shorter.expiresAt));
    expect(Date.parse(kept.expiresAt)).toBeGreaterThanOrEqual(Date.now() + 590_000);
    expect((await api('POST', `/v1/sandboxes/${sandbox.id}/timeout`, { ttlSeconds: 'soon' })).status).toBe(400);
  });

  it('refuses a setTimeout of seconds (under 1000 ms) and leaves the expiry alone; static Sandbox.setTimeout moves it by id', async () => {
    const before = (await sandbox.info()).expiresAt;
    await expect(sandbox.setTimeout(600)).rejects.toMatchObject({ code: 'INVALID_PARAMS', message: expect.stringMatching(/milliseconds.*600_000/) });
    expect((await sandbox.info()).expiresAt).toBe(before);
    const asked = Date.now();
    const moved = await Sandbox.setTimeout(sandbox.id, 300_000, { baseUrl: warren.url, token: sandbox.token });
    expect(Date.parse(moved.expiresAt) - asked).toBeGreaterThanOrEqual(299_000);
    expect(Date.parse(moved.expiresAt) - asked).toBeLessThanOrEqual(305_000);
  });

  it('pauses and resumes: processes are frozen and files kept', async () => {
    await sandbox.commands.run(['sh', '-c', 'printf "still here" > /workspace/kept.txt']);
    const paused = await sandbox.pause();
    expect(paused.state).toBe('paused');
    expect((await docker.getContainer(warren.controller.sandboxes.record(sandbox.id).containerId).inspect()).State.Paused).toBe(true);
    expect((await Sandbox.list({ baseUrl: warren.url, apiKey: warren.apiKey, state: 'paused' })).map((s) => s.id)).toContain(sandbox.id);
    // A connection that asks not to resume is refused with a clear message.
    await expect(Sandbox.connect(sandbox.id, { baseUrl: warren.url, token: sandbox.token, resume: false })).rejects.toThrow(/paused|resume/);
    const twice = await api('POST', `/v1/sandboxes/${sandbox.id}/pause`);
    expect(twice.status).toBe(409);
    expect((await sandbox.resume()).state).toBe('running');
    const run = await sandbox.commands.run('cat /workspace/kept.txt');
    expect(run.stdout).toBe('still here');
  });

  it("connects to a paused sandbox as E2B's connect does: resumed, its processes where they were", async () => {
    const background = await sandbox.commands.start('sleep 600');
    await sandbox.pause();
    const again = await Sandbox.connect(sandbox.id, { baseUrl: warren.url, token: sandbox.token });
    try {
      expect((await Sandbox.getInfo(sandbox.id, { baseUrl: warren.url, apiKey: warren.apiKey })).state).toBe('running');
      expect((await again.commands.run(`kill -0 ${background.pid} && echo alive`)).stdout).toBe('alive\n');
    } finally {
      await background.kill();
      again.close();
    }
  });

  it('kills and describes by id without a connection (static Sandbox.kill and Sandbox.getInfo, as in E2B)', async () => {
    const other = await Sandbox.create({ baseUrl: warren.url, apiKey: warren.apiKey });
    const options = { baseUrl: warren.url, apiKey: warren.apiKey };
    expect(await Sandbox.getInfo(other.id, { baseUrl: warren.url, token: other.token })).toMatchObject({ id: other.id, state: 'running' });
    expect(await Sandbox.kill(other.id, options)).toBe(true);
    expect(await Sandbox.kill(other.id, options)).toBe(false);
    await expect(Sandbox.getInfo(other.id, options)).rejects.toMatchObject({ code: 'SANDBOX_NOT_FOUND' });
    other.close();
  });

  it('reaps a sandbox when its time is up, container and state gone', async () => {
    const short = await Sandbox.create({ baseUrl: warren.url, apiKey: warren.apiKey, ttlSeconds: 10 });
    const containerId = warren.controller.sandboxes.record(short.id).containerId;
    await short.setTimeout(1000);
    await until('the reaper', async () => (warren.controller.sandboxes.has(short.id) ? undefined : true));
    await expect(docker.getContainer(containerId).inspect()).rejects.toMatchObject({ statusCode: 404 });
    const res = await api('GET', `/v1/sandboxes/${short.id}`);
    expect(res.status).toBe(404);
    expect(((await res.json()) as { error: { code: string } }).error.code).toBe('SANDBOX_NOT_FOUND');
    short.close();
  });

  it('kills on DELETE: the container and its workspace (its own disk, or a volume where the host gives no quota) are removed', async () => {
    const doomed = await Sandbox.create({ baseUrl: warren.url, apiKey: warren.apiKey });
    const containerId = warren.controller.sandboxes.record(doomed.id).containerId;
    const workspace = (await docker.getContainer(containerId).inspect()).Mounts.find((m) => m.Destination === '/workspace');
    expect(workspace).toBeTruthy();
    await doomed.kill();
    await expect(docker.getContainer(containerId).inspect()).rejects.toMatchObject({ statusCode: 404 });
    if (workspace!.Type === 'volume') await expect(docker.getVolume(workspace!.Name!).inspect()).rejects.toMatchObject({ statusCode: 404 });
    else {
      // The disk's mount and image are gone: nothing of it is left on the host.
      expect(await readFile('/proc/self/mountinfo', 'utf8')).not.toContain(path.dirname(workspace!.Source));
      await expect(stat(`${path.dirname(workspace!.Source)}.ext4`)).rejects.toMatchObject({ code: 'ENOENT' });
    }
    expect((await api('DELETE', `/v1/sandboxes/${doomed.id}`)).status).toBe(404);
  });

  it('forgets a sandbox whose container was removed behind its back', async () => {
    const victim = await Sandbox.create({ baseUrl: warren.url, apiKey: warren.apiKey });
    victim.close();
    await docker.getContainer(warren.controller.sandboxes.record(victim.id).containerId).remove({ force: true, v: true });
    await until('the reaper to notice', async () => (warren.controller.sandboxes.has(victim.id) ? undefined : true));
    expect((await api('GET', `/v1/sandboxes/${victim.id}`)).status).toBe(404);
  });

  it('answers /healthz, /readyz, and /metrics in Prometheus format', async () => {
    expect((await fetch(`${warren.url}/healthz`)).status).toBe(200);
    const ready = await fetch(`${warren.url}/readyz`);
    expect(ready.status).toBe(200);
    expect(await ready.json()).toMatchObject({ status: 'ready', docker: 'ok', defaultImage: 'warren/sandbox:latest' });
    await sandbox.commands.run('true');
    const metrics = await api('GET', '/metrics');
    expect(metrics.status).toBe(200);
    expect(metrics.headers.get('content-type')).toMatch(/text\/plain/);
    const text = await metrics.text();
    expect(text).toMatch(/^warren_sandboxes\{state="running"\} [1-9]/m);
    expect(text).toMatch(/^warren_sandbox_creates_total\{source="cold",outcome="ok"\} [1-9]/m);
    expect(text).toMatch(/^warren_sandbox_create_seconds_bucket\{le="[^"]+",source="cold"\} \d+/m);
    expect(text).toMatch(/^warren_calls_total\{method="process\.exec",outcome="ok"\} [1-9]/m);
    expect(text).toMatch(/^warren_call_seconds_bucket\{le="[^"]+",method="process\.exec"\} \d+/m);
    expect(text).toMatch(/^warren_errors_total\{code="SANDBOX_NOT_FOUND",source="rest"\} [1-9]/m);
    expect((await fetch(`${warren.url}/metrics`)).status).toBe(401);
  });
});
