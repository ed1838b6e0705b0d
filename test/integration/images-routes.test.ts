import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { describe, expect, it } from '@jest/globals';
import { Images, RestClient } from '@warren/sdk';
import { codeOf, tar } from '../support/files.js';
import { startLocalController } from '../support/local-controller.js';

describe('the image routes, through a real controller (local provider: every image is "on the engine")', () => {
  it('refuses an invalid reference with IMAGE_NOT_ALLOWED before the answer starts, and answers a present image with a done line', async () => {
    await using warren = await startLocalController();
    const images = new Images({ baseUrl: warren.url, apiKey: warren.apiKey });
    await expect(images.pull('Evil/Upper')).rejects.toMatchObject({ name: 'ImageNotAllowedError', code: 'IMAGE_NOT_ALLOWED' });
    const res = await fetch(`${warren.url}/v1/images/pull`, {
      method: 'POST',
      headers: { authorization: `Bearer ${warren.apiKey}`, 'content-type': 'application/json' },
      body: JSON.stringify({ image: 'https://evil.com/x' }),
    });
    expect(res.status).toBe(403);
    await expect(images.pull('alpine:3.20')).resolves.toEqual({ image: 'alpine:3.20' });
  });

  it('refuses a build context with a link out of it (INVALID_PARAMS) and one over images.maxBuildContextMb (413 BUILD_CONTEXT_TOO_LARGE)', async () => {
    await using warren = await startLocalController({
      images: { allowedRegistries: ['docker.io'], pull: 'missing', maxPullMb: 10, maxBuildContextMb: 1, buildNetwork: 'none', timeoutMs: 60_000 },
    });
    const rest = new RestClient(warren.url, warren.apiKey);
    const escaping = await tar([
      { header: { name: 'Dockerfile', type: 'file', mode: 0o644 }, data: 'FROM alpine' },
      { header: { name: 'etc', type: 'symlink', linkname: '../../../etc' } },
    ]);
    await expect(rest.buildImage(escaping, { tag: 'tmpl' }, () => undefined)).rejects.toMatchObject({
      code: 'INVALID_PARAMS',
      message: /leaves the archive folder/,
    });
    const big = await tar([
      { header: { name: 'Dockerfile', type: 'file', mode: 0o644 }, data: 'FROM alpine' },
      { header: { name: 'blob', type: 'file', mode: 0o644 }, data: 'x'.repeat(2 * 1024 * 1024) },
    ]);
    expect(await codeOf(rest.buildImage(big, { tag: 'tmpl' }, () => undefined))).toBe('BUILD_CONTEXT_TOO_LARGE');
    expect(await codeOf(new RestClient(warren.url, 'wrong').buildImage(escaping, { tag: 'tmpl' }, () => undefined))).toBe('UNAUTHORIZED');
  });

  it('a failure after the answer started arrives as the error line, as the SDK error of its code', async () => {
    await using warren = await startLocalController();
    const dir = await mkdtemp(path.join(os.tmpdir(), 'warren-ctx-'));
    try {
      await writeFile(path.join(dir, 'Dockerfile'), 'FROM alpine:3.20\nRUN true\n');
      const images = new Images({ baseUrl: warren.url, apiKey: warren.apiKey });
      // The local provider builds nothing: its refusal comes after the checks, inside the 200 answer.
      await expect(images.build({ context: dir, tag: 'tmpl' })).rejects.toMatchObject({ name: 'InvalidParamsError', message: /builds no images/ });
      await expect(images.build({ context: dir, tag: 'docker.io/library/alpine' })).rejects.toMatchObject({ code: 'INVALID_PARAMS', message: /registry host/ });
      expect(await images.list()).toEqual([]);
      expect(await codeOf(images.remove('nothing:1'))).toBe('NOT_FOUND');
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  });
});
