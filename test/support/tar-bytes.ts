/**
 * Tar archives written byte by byte, so the malformed ones are exactly as hostile as meant (a tar
 * library would refuse to write most of them). Used by the shared tar reader's unit test and by
 * the upload and download tests.
 */

export interface HeaderSpec {
  name?: string | Buffer;
  flag?: string;
  size?: number;
  /** The size field's raw text, when it should not be a valid octal number. */
  sizeField?: string;
  mode?: number;
  linkname?: string;
  prefix?: string;
  magic?: 'ustar' | 'gnu' | 'none';
  /** Added to the correct checksum (0: correct). */
  checksumDelta?: number;
}

export function header(spec: HeaderSpec): Buffer {
  const block = Buffer.alloc(512);
  const name = typeof spec.name === 'string' || spec.name === undefined ? Buffer.from(spec.name ?? 'f.txt') : spec.name;
  name.copy(block, 0, 0, Math.min(100, name.length));
  block.write(`${(spec.mode ?? 0o644).toString(8).padStart(7, '0')}\0`, 100, 'latin1');
  block.write('0000000\0', 108, 'latin1');
  block.write('0000000\0', 116, 'latin1');
  block.write(spec.sizeField ?? `${(spec.size ?? 0).toString(8).padStart(11, '0')}\0`, 124, 'latin1');
  block.write('14712345670\0', 136, 'latin1');
  block.write(spec.flag ?? '0', 156, 'latin1');
  if (spec.linkname) block.write(spec.linkname, 157, 'utf8');
  const magic = spec.magic ?? 'ustar';
  if (magic === 'ustar') block.write('ustar\u000000', 257, 'latin1');
  if (magic === 'gnu') block.write('ustar  \u0000', 257, 'latin1');
  if (spec.prefix) block.write(spec.prefix, 345, 'utf8');
  block.fill(0x20, 148, 156);
  let sum = 0;
  for (const b of block) sum += b;
  block.write(`${(sum + (spec.checksumDelta ?? 0)).toString(8).padStart(6, '0')}\0 `, 148, 'latin1');
  return block;
}

export const pad = (data: Buffer) => Buffer.concat([data, Buffer.alloc((512 - (data.length % 512)) % 512)]);
export const END = Buffer.alloc(1024);

/** One entry: its header block(s) and padded data. */
export function file(name: string, data: string | Buffer, extra: HeaderSpec = {}): Buffer {
  const bytes = Buffer.from(data);
  return Buffer.concat([header({ name, size: bytes.length, ...extra }), pad(bytes)]);
}

/** A PAX record with a correct length prefix. */
export function record(key: string, value: string | Buffer): Buffer {
  const body = Buffer.concat([Buffer.from(` ${key}=`), Buffer.from(value), Buffer.from('\n')]);
  let length = body.length + 1;
  while (String(length).length + body.length !== length) length = String(length).length + body.length;
  return Buffer.concat([Buffer.from(String(length)), body]);
}

/** A PAX header ('x', or 'g' for global) carrying raw record bytes. */
export function pax(records: Buffer, flag = 'x'): Buffer {
  return Buffer.concat([header({ name: 'PaxHeader/x', flag, size: records.length }), pad(records)]);
}

/** A GNU long name ('L') or long link ('K') carrying raw bytes. */
export function longName(bytes: Buffer, flag = 'L'): Buffer {
  return Buffer.concat([header({ name: '././@LongLink', flag, size: bytes.length, magic: 'gnu' }), pad(bytes)]);
}

export const archive = (...parts: Buffer[]) => Buffer.concat([...parts, END]);
