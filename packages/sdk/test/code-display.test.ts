import { describe, expect, it } from '@jest/globals';
import { displayImage } from '../src/index.js';

const PNG = Buffer.concat([Buffer.from([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a]), Buffer.alloc(16)]);
const JPEG = Buffer.concat([Buffer.from([0xff, 0xd8, 0xff, 0xe0]), Buffer.alloc(16)]);

describe('displayImage reads image outputs as hostile', () => {
  it('returns a PNG or JPEG whose base64 decodes to that format, with Jupyter line breaks removed', () => {
    const wrapped = PNG.toString('base64').replace(/(.{8})/g, '$1\n');
    expect(displayImage({ isMainResult: false, data: { 'image/png': wrapped }, truncated: false })).toMatchObject({
      mimeType: 'image/png',
      base64: PNG.toString('base64'),
    });
    expect(displayImage({ isMainResult: false, data: { 'image/jpeg': JPEG.toString('base64') }, truncated: false })?.bytes.equals(JPEG)).toBe(true);
  });

  it('refuses text that is not base64, base64 of another format, a value that is not text, and a signature alone', () => {
    for (const value of [
      'not base64 at all!',
      'iVBORw0KGgo',
      Buffer.from('GIF89a' + 'x'.repeat(20)).toString('base64'),
      12345,
      { a: 1 },
      PNG.subarray(0, 8).toString('base64'),
    ]) {
      expect(displayImage({ isMainResult: false, data: { 'image/png': value }, truncated: false })).toBeUndefined();
    }
    expect(displayImage({ isMainResult: false, data: { 'image/jpeg': PNG.toString('base64') }, truncated: false })).toBeUndefined();
  });

  it('checks a large value in linear time', () => {
    const big = `${'A'.repeat(8 * 1024 * 1024)}!`;
    const started = performance.now();
    expect(displayImage({ isMainResult: false, data: { 'image/png': big }, truncated: false })).toBeUndefined();
    process.stderr.write(`displayImage: 8 MiB of not-quite-base64 checked in ${Math.round(performance.now() - started)} ms\n`);
  });
});
