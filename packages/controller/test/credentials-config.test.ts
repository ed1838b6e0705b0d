import { mkdtemp, readFile, readdir, rm, stat, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from '@jest/globals';
import { Credentials } from '../src/credentials.js';
import { defaultAgentBundlePath, loadConfig } from '../src/config.js';
import { defaultDaemonChannel } from '../src/kubernetes/provider.js';

let dir: string;
beforeEach(async () => {
  dir = await mkdtemp(path.join(os.tmpdir(), 'warren-cred-'));
});
afterEach(async () => {
  await rm(dir, { recursive: true, force: true });
});

describe('API keys', () => {
  it('generates a key once and stores only its SHA-256 digest, mode 0600', async () => {
    const first = await Credentials.load(dir, undefined);
    expect(first.generatedApiKey).toMatch(/^wk_/);
    const stored = await readFile(path.join(dir, 'api-key.sha256'), 'utf8');
    expect(stored.trim()).toBe(Credentials.hashApiKey(first.generatedApiKey!));
    expect(stored).not.toContain(first.generatedApiKey);
    expect((await stat(path.join(dir, 'api-key.sha256'))).mode & 0o777).toBe(0o600);
    expect(await readdir(dir)).not.toContain('api-key');

    const second = await Credentials.load(dir, undefined);
    expect(second.generatedApiKey).toBeUndefined();
    expect(second.credentials.isApiKey(first.generatedApiKey!)).toBe(true);
    expect(second.credentials.isApiKey(`${first.generatedApiKey!}x`)).toBe(false);
    expect(second.credentials.isApiKey('')).toBe(false);
  });

  it('moves a plain-text key of an older state folder to its digest and keeps it working', async () => {
    await writeFile(path.join(dir, 'api-key'), 'wk_legacy\n', { mode: 0o600 });
    const { credentials, generatedApiKey } = await Credentials.load(dir, undefined);
    expect(generatedApiKey).toBeUndefined();
    expect(credentials.isApiKey('wk_legacy')).toBe(true);
    expect(await readdir(dir)).not.toContain('api-key');
  });

  it('accepts a key from the environment and extra digests from the configuration, writing neither', async () => {
    const { credentials } = await Credentials.load(dir, 'wk_env', [Credentials.hashApiKey('wk_other')]);
    expect(credentials.isApiKey('wk_env')).toBe(true);
    expect(credentials.isApiKey('wk_other')).toBe(true);
    expect(credentials.isApiKey('wk_none')).toBe(false);
    expect(await readdir(dir)).toEqual(['master.key']);
  });
});

describe('derived tokens', () => {
  it('round-trip through the signature and survive a restart (same master key)', async () => {
    const { credentials } = await Credentials.load(dir, 'wk_env');
    const token = credentials.deriveToken({ sandboxId: 'abc', grant: { allowExec: false }, expiresAt: 123 });
    expect(token).toMatch(/^wsd_[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+$/);
    const restarted = (await Credentials.load(dir, 'wk_env')).credentials;
    expect(restarted.readDerivedToken(token)).toEqual({ sandboxId: 'abc', grant: { allowExec: false }, expiresAt: 123, tokenId: expect.any(String) });
    expect(restarted.instanceId).toBe(credentials.instanceId);
  });

  it('refuse a changed payload, a changed signature, and another master key', async () => {
    const { credentials } = await Credentials.load(dir, 'wk_env');
    const token = credentials.deriveToken({ sandboxId: 'abc', grant: { allowExec: false } });
    const [payload, mac] = token.slice(4).split('.');
    const widened = Buffer.from(JSON.stringify({ s: 'abc', g: { allowExec: true } })).toString('base64url');
    expect(credentials.readDerivedToken(`wsd_${widened}.${mac}`)).toBeUndefined();
    expect(credentials.readDerivedToken(`wsd_${payload}.${mac}x`)).toBeUndefined();
    expect(Credentials.inMemory('k').readDerivedToken(token)).toBeUndefined();
    expect(credentials.readDerivedToken('wst_abc')).toBeUndefined();
  });
});

describe('configuration', () => {
  it('reads a YAML file, then lets WARREN_* variables and overrides win', async () => {
    const file = path.join(dir, 'warren.yaml');
    await writeFile(file, ['port: 8000', 'poolSize: 2', 'allowedMountRoots: [/srv/data]', 'limits:', '  memoryMb: 512', 'killOnShutdown: true'].join('\n'));
    const config = loadConfig({ WARREN_CONFIG: file, WARREN_PORT: '9000', WARREN_STATE_DIR: dir }, { heartbeatMs: 1000 });
    expect(config).toMatchObject({ port: 9000, poolSize: 2, allowedMountRoots: ['/srv/data'], killOnShutdown: true, heartbeatMs: 1000, stateDir: dir });
    expect(config.limits).toEqual({ memoryMb: 512, cpus: 1, pidsLimit: 512, ttlSeconds: 3600, tmpMb: 256, openFiles: 4096, fileSizeMb: 4096, diskMb: 1024 });
  });

  it('selects the Kubernetes provider with its settings from the file and the environment, and refuses a bad namespace', async () => {
    const file = path.join(dir, 'warren.yaml');
    await writeFile(
      file,
      ['provider: kubernetes', 'kubernetes:', '  namespace: sandboxes', '  runtimeClasses: { runsc: gvisor }', '  imagePullPolicy: Never'].join('\n'),
    );
    const config = loadConfig({ WARREN_CONFIG: file, WARREN_KUBECONFIG: '/etc/warren/kubeconfig' });
    expect(config.provider).toBe('kubernetes');
    expect(config.kubernetes).toEqual({
      namespace: 'sandboxes',
      kubeconfig: '/etc/warren/kubeconfig',
      runtimeClasses: { runsc: 'gvisor' },
      imagePullPolicy: 'Never',
      nodeSelector: {},
      startTimeoutMs: 120_000,
    });
    expect(loadConfig({}).provider).toBe('docker');
    expect(() => loadConfig({ WARREN_K8S_NAMESPACE: 'Not_A_Namespace' })).toThrow(/WARREN_K8S_NAMESPACE.*a Kubernetes namespace name/);
    expect(loadConfig({ WARREN_K8S_DAEMON_CHANNEL: 'pod-ip' }).kubernetes.daemonChannel).toBe('pod-ip');
    expect(() => loadConfig({ WARREN_K8S_DAEMON_CHANNEL: 'carrier-pigeon' })).toThrow(/WARREN_K8S_DAEMON_CHANNEL/);
    expect(defaultDaemonChannel({ KUBERNETES_SERVICE_HOST: '10.96.0.1' })).toBe('pod-ip');
    expect(defaultDaemonChannel({})).toBe('port-forward');
  });

  it("serves the checkout's agent bundle when there is one, else the copy the published package carries in dist/agent/", () => {
    expect(defaultAgentBundlePath((file) => file.endsWith('/agent/dist/warren-agent.mjs'))).toMatch(/\/packages\/agent\/dist\/warren-agent\.mjs$/);
    expect(defaultAgentBundlePath(() => false)).toMatch(/\/packages\/controller\/dist\/agent\/warren-agent\.mjs$/);
    expect(loadConfig({ WARREN_AGENT_BUNDLE: '/opt/agent.mjs' }).agentBundlePath).toBe('/opt/agent.mjs');
  });

  it('reads JSON, and refuses unknown keys naming them', async () => {
    const file = path.join(dir, 'warren.json');
    await writeFile(file, JSON.stringify({ maxSandboxes: 5, privileged: true }));
    expect(() => loadConfig({ WARREN_CONFIG: file })).toThrow(/privileged/);
    await writeFile(file, JSON.stringify({ maxSandboxes: 5 }));
    expect(loadConfig({ WARREN_CONFIG: file }).maxSandboxes).toBe(5);
  });

  it('parses list and boolean variables and refuses nonsense', () => {
    const config = loadConfig({ WARREN_ALLOWED_MOUNTS: '/a:/b', WARREN_ALLOW_BRIDGE_NETWORK: 'false', WARREN_ALLOWED_ORIGINS: 'http://x, http://y' });
    expect(config).toMatchObject({ allowedMountRoots: ['/a', '/b'], allowBridgeNetwork: false, allowedOrigins: ['http://x', 'http://y'] });
    expect(() => loadConfig({ WARREN_POOL_SIZE: 'many' })).toThrow(/WARREN_POOL_SIZE/);
    expect(() => loadConfig({ WARREN_KILL_ON_SHUTDOWN: 'maybe' })).toThrow(/WARREN_KILL_ON_SHUTDOWN/);
  });

  it('reads the disk quota settings from the file and WARREN_* variables, and refuses an unknown mode', async () => {
    expect(loadConfig({})).toMatchObject({ workspaceQuota: 'auto', workspaceReserveMb: undefined, limits: { diskMb: 1024 }, maxLimits: { diskMb: 65536 } });
    const file = path.join(dir, 'quota.yaml');
    await writeFile(file, ['workspaceQuota: required', 'workspaceReserveMb: 4096', 'maxLimits:', '  diskMb: 8192'].join('\n'));
    expect(loadConfig({ WARREN_CONFIG: file, WARREN_DISK_MB: '2048' })).toMatchObject({
      workspaceQuota: 'required',
      workspaceReserveMb: 4096,
      limits: { diskMb: 2048 },
      maxLimits: { diskMb: 8192 },
    });
    expect(loadConfig({ WARREN_CONFIG: file, WARREN_WORKSPACE_QUOTA: 'off' }).workspaceQuota).toBe('off');
    expect(() => loadConfig({ WARREN_WORKSPACE_QUOTA: 'maybe' })).toThrow(/WARREN_WORKSPACE_QUOTA \(workspaceQuota\): Invalid option/);
    await writeFile(file, 'workspaceQuota: sometimes');
    expect(() => loadConfig({ WARREN_CONFIG: file })).toThrow(/workspaceQuota/);
  });

  it("reads WARREN_* variables through the file's schema: the same limits and the same errors", async () => {
    expect(() => loadConfig({ WARREN_PORT: '99999' })).toThrow(/WARREN_PORT \(port\): Too big: expected number to be <=65535/);
    const file = path.join(dir, 'port.json');
    await writeFile(file, JSON.stringify({ port: 99999 }));
    expect(() => loadConfig({ WARREN_CONFIG: file })).toThrow(/port: Too big: expected number to be <=65535/);
    expect(() => loadConfig({ WARREN_POOL_SIZE: '1000' })).toThrow(/WARREN_POOL_SIZE \(poolSize\)/);
    expect(() => loadConfig({ WARREN_MEMORY_MB: 'lots' })).toThrow(/WARREN_MEMORY_MB \(limits.memoryMb\)/);
    expect(() => loadConfig({ WARREN_API_KEY_HASHES: 'nothex' })).toThrow(/WARREN_API_KEY_HASHES/);
    expect(loadConfig({ WARREN_PORT: '8080', WARREN_ALLOWED_MOUNTS: '/a:/b', WARREN_KILL_ON_SHUTDOWN: 'yes' })).toMatchObject({
      port: 8080,
      allowedMountRoots: ['/a', '/b'],
      killOnShutdown: true,
    });
  });
});
