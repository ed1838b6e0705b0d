import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import { Sandbox } from '@warren/sdk';
import { codeOf } from '../support/files.js';
import { startTestController, type TestController } from '../support/fixtures.js';
import { DaemonIdentity, HostSentinel, sandboxCode } from '../support/redteam.js';

/**
 * One request must not stall or kill the daemon, whoever sends it: files sandbox code made (sparse,
 * many, long-named) meet requests from a narrowed, read-only token without exec.
 */
describe('red team: requests that would stall or kill the daemon', () => {
  let warren: TestController;
  let sandbox: Sandbox;
  let reader: Sandbox;
  let sentinel: HostSentinel;
  let daemon: DaemonIdentity;

  beforeAll(async () => {
    warren = await startTestController();
    // The largest file size limit a create may ask for, so sandbox code can make a 50 GB sparse file.
    sandbox = await Sandbox.create({ baseUrl: warren.url, apiKey: warren.apiKey, fileSizeMb: 65536 });
    sentinel = await HostSentinel.make();
    // Sandbox code plants what the requests will meet.
    const planted = await sandboxCode(
      sandbox,
      `mkdir -p /workspace/d && cd /workspace/d && truncate -s 50G huge.bin && truncate -s 1536M big.bin && seq 1 300 | sed 's/^/${'a'.repeat(150)}/' | xargs touch && echo planted=yes`,
    );
    expect(planted.facts.planted).toBe('yes');
    const { token } = await sandbox.deriveToken({ allowRead: ['/workspace/d'], readonly: true });
    reader = await Sandbox.connect(sandbox.id, { baseUrl: warren.url, token });
    daemon = await DaemonIdentity.of(sandbox);
  }, 60_000);

  afterAll(async () => {
    reader?.close();
    await warren?.[Symbol.asyncDispose]();
    await sentinel?.remove();
  });

  const unharmed = async () => {
    const info = await daemon.expectSame(sandbox);
    expect(info.rssBytes).toBeLessThan(300 * 1024 * 1024);
    await sentinel.expectUnchanged();
  };

  it('sparse files of 1.5 GiB and 50 GB: downloads and whole reads are refused with FILE_TOO_LARGE, not an out-of-memory daemon', async () => {
    for (const path of ['/workspace/d/huge.bin', '/workspace/d/big.bin', '/workspace/d'])
      expect([path, await codeOf(reader.files.download(path))]).toEqual([path, 'FILE_TOO_LARGE']);
    expect(await codeOf(reader.files.read('/workspace/d/big.bin'))).toBe('FILE_TOO_LARGE');
    await unharmed();
  });

  it('a glob with many stars and a negation answers in bounded time while other calls go on', async () => {
    const glob = reader.files.glob('/workspace/d', `!**/${'*a'.repeat(15)}*b`);
    const started = Date.now();
    await sandbox.files.stat('/workspace/d');
    expect(Date.now() - started).toBeLessThan(2_000);
    expect((await glob).length).toBeGreaterThanOrEqual(300);
    await unharmed();
  });

  it('concurrent edits of one file, from two handles: each lands or gets CONFLICT', async () => {
    const lines = Array.from({ length: 30 }, (_, i) => `line ${i}`);
    await sandbox.files.write('/workspace/shared.txt', `${lines.join('\n')}\n`);
    const other = await Sandbox.connect(sandbox.id, { baseUrl: warren.url, apiKey: warren.apiKey });
    const outcomes = await Promise.all(
      lines.map((line, i) =>
        (i % 2 ? other : sandbox).files.edit('/workspace/shared.txt', `${line}\n`, `edited ${i}\n`).then(
          () => i,
          (err: { code?: string }) => err.code,
        ),
      ),
    );
    other.close();
    const text = await sandbox.files.read('/workspace/shared.txt');
    for (const o of outcomes) {
      if (typeof o === 'number') expect(text).toContain(`edited ${o}\n`);
      else expect(o).toBe('CONFLICT');
    }
    await unharmed();
  });
});
