import { execFile } from 'node:child_process';
import path from 'node:path';
import { promisify } from 'node:util';
import { describe, expect, it } from '@jest/globals';
import { startTestController } from '../support/fixtures.js';

const run = promisify(execFile);
// jest runs from the repository's root (jest.config.js).
const repoRoot = process.cwd();

describe('the published packages, installed from their tarballs outside the workspace', () => {
  it("pack-check packs, lints and installs them, and the SDK README's example runs against a real Warren", async () => {
    await using warren = await startTestController();
    // pack-check reports on stderr; it fails (and run throws) unless the example printed the greeting.
    const { stderr } = await run(path.join(repoRoot, 'scripts/pack-check'), ['--live', warren.url, warren.apiKey], {
      cwd: repoRoot,
      maxBuffer: 64 * 1024 * 1024,
      timeout: 280_000,
    });
    expect(stderr).toMatch(/it printed: 0 hello from the sandbox/);
  }, 300_000);
});
