import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { afterEach, beforeEach, describe, expect, it, jest } from '@jest/globals';
import { loadConfig } from '@warren/controller';
import { buildProgram } from '../src/program.js';

let dir: string;
const saved = { ...process.env };
beforeEach(async () => {
  dir = await mkdtemp(path.join(os.tmpdir(), 'warren-print-'));
  for (const key of Object.keys(process.env)) if (key.startsWith('WARREN_') || key === 'LOG_LEVEL') delete process.env[key];
});
afterEach(async () => {
  process.env = { ...saved };
  jest.restoreAllMocks();
  await rm(dir, { recursive: true, force: true });
});

/** Runs `warren serve ...args` in this process and returns what it printed on standard output. */
async function serve(...args: string[]): Promise<string> {
  let printed = '';
  jest.spyOn(process.stdout, 'write').mockImplementation((chunk: string | Uint8Array) => {
    printed += String(chunk);
    return true;
  });
  await buildProgram()
    .exitOverride()
    .parseAsync(['node', 'warren', 'serve', ...args]);
  return printed;
}

describe('warren serve --print-config', () => {
  it('prints the configuration after the file, the environment and the flags, with the secrets redacted, and starts nothing', async () => {
    const file = path.join(dir, 'warren.yaml');
    await writeFile(file, ['port: 8000', 'poolSize: 2', 'logLevel: warn', 'limits:', '  memoryMb: 512'].join('\n'));
    Object.assign(process.env, { WARREN_API_KEY: 'wk_do_not_print', WARREN_POOL_SIZE: '3', WARREN_STATE_DIR: dir, LOG_LEVEL: 'debug' });
    const printed = await serve('--print-config', '--config', file, '--port', '9001');
    const config = JSON.parse(printed) as Record<string, unknown>;
    expect(config).toMatchObject({ port: 9001, poolSize: 3, logLevel: 'debug', stateDir: dir, apiKey: '[redacted]', limits: { memoryMb: 512, cpus: 1 } });
    expect(printed).not.toContain('wk_do_not_print');
  });

  it('fails on an invalid setting with the error a start gives', async () => {
    process.env.WARREN_PORT = '99999';
    const startError = (() => {
      try {
        loadConfig(process.env);
      } catch (err) {
        return (err as Error).message;
      }
      throw new Error('loadConfig accepted WARREN_PORT=99999');
    })();
    expect(startError).toMatch(/WARREN_PORT \(port\)/);
    await expect(serve('--print-config')).rejects.toThrow(startError);
  });

  it('fails on a bad configuration file, naming the key', async () => {
    const file = path.join(dir, 'bad.json');
    await writeFile(file, JSON.stringify({ privileged: true }));
    await expect(serve('--print-config', '--config', file)).rejects.toThrow(/The configuration file .*bad\.json is invalid: .*privileged/);
  });
});
