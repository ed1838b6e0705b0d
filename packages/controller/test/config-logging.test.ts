import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from '@jest/globals';
import { loadConfig, readFlags, redactConfig } from '../src/config.js';
import { REDACTED } from '../src/logger.js';

let dir: string;
beforeEach(async () => {
  dir = await mkdtemp(path.join(os.tmpdir(), 'warren-config-'));
});
afterEach(async () => {
  await rm(dir, { recursive: true, force: true });
});

describe('LOG_LEVEL', () => {
  it('is info by default, read from the file as logLevel, and LOG_LEVEL wins over the file', async () => {
    expect(loadConfig({}).logLevel).toBe('info');
    const file = path.join(dir, 'warren.yaml');
    await writeFile(file, 'logLevel: warn\n');
    expect(loadConfig({ WARREN_CONFIG: file }).logLevel).toBe('warn');
    expect(loadConfig({ WARREN_CONFIG: file, LOG_LEVEL: 'debug' }).logLevel).toBe('debug');
  });

  it('is checked by the same schema as every other setting, naming the variable and the levels', async () => {
    expect(() => loadConfig({ LOG_LEVEL: 'loud' })).toThrow(
      /LOG_LEVEL \(logLevel\): Invalid option: expected one of "fatal"\|"error"\|"warn"\|"info"\|"debug"\|"trace"\|"silent"/,
    );
    const file = path.join(dir, 'warren.json');
    await writeFile(file, JSON.stringify({ logLevel: 'loud' }));
    expect(() => loadConfig({ WARREN_CONFIG: file })).toThrow(/logLevel: Invalid option/);
  });
});

describe('flags', () => {
  it('go through the same schema, naming the flag', () => {
    expect(readFlags({ port: 8080, host: undefined })).toEqual({ port: 8080 });
    expect(() => readFlags({ port: 70000 })).toThrow(/Invalid command-line option: --port: Too big: expected number to be <=65535/);
  });
});

describe('redactConfig', () => {
  it('hides the API key and its digests, and shows every other setting', () => {
    const digest = 'a'.repeat(64);
    const config = loadConfig({ WARREN_API_KEY: 'wk_very_secret', WARREN_API_KEY_HASHES: digest, WARREN_PORT: '8123' });
    const shown = redactConfig(config);
    expect(shown).toMatchObject({ apiKey: REDACTED, apiKeyHashes: [REDACTED], port: 8123, logLevel: 'info', limits: config.limits });
    expect(JSON.stringify(shown)).not.toContain('wk_very_secret');
    expect(JSON.stringify(shown)).not.toContain(digest);
    expect(Object.keys(shown).sort()).toEqual(Object.keys({ ...config, apiKey: null }).sort());
    expect(redactConfig(loadConfig({}))).toMatchObject({ apiKey: null, workspaceReserveMb: null, apiKeyHashes: [] });
  });
});

describe('images settings', () => {
  it('default to pulls from docker.io only, no build network, and read the file and the variables', async () => {
    expect(loadConfig({}).images).toEqual({
      allowedRegistries: ['docker.io'],
      pull: 'missing',
      maxPullMb: 4096,
      maxBuildContextMb: 256,
      buildNetwork: 'none',
      timeoutMs: 900_000,
    });
    const file = path.join(dir, 'warren.yaml');
    await writeFile(file, 'images: { allowedRegistries: [], maxPullMb: 10 }\n');
    expect(loadConfig({ WARREN_CONFIG: file }).images).toMatchObject({ allowedRegistries: [], maxPullMb: 10, pull: 'missing' });
    expect(loadConfig({ WARREN_CONFIG: file, WARREN_ALLOWED_REGISTRIES: 'ghcr.io/acme, 127.0.0.1:5000', WARREN_IMAGE_PULL: 'never' }).images).toMatchObject({
      allowedRegistries: ['ghcr.io/acme', '127.0.0.1:5000'],
      pull: 'never',
      maxPullMb: 10,
    });
  });

  it('refuse a bad registry entry or build network, naming the variable', () => {
    expect(() => loadConfig({ WARREN_ALLOWED_REGISTRIES: 'docker.io,https://evil.com' })).toThrow(
      /WARREN_ALLOWED_REGISTRIES \(images\.allowedRegistries\.1\): allowedRegistries: 'https:\/\/evil\.com' does not start with a registry host/,
    );
    expect(() => loadConfig({ WARREN_BUILD_NETWORK: 'host' })).toThrow(/WARREN_BUILD_NETWORK \(images\.buildNetwork\): Invalid option/);
  });
});
