import { randomBytes } from 'node:crypto';
import { chmod, link, mkdir, mkdtemp, readdir, readFile, realpath, rm, stat, symlink, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from '@jest/globals';
import { startAgentServer, type AgentServer } from '@warren/agent';
import {
  decodeFrame,
  encodeFrame,
  encodeGrant,
  MAX_WRITE_GAP_BYTES,
  narrowPolicy,
  PROTOCOL_VERSION,
  type FilePolicy,
  type FrameHeader,
} from '@warren/protocol';
import { Connection, WarrenError } from '@warren/sdk';
import { WebSocket } from 'ws';
import { codeOf } from '../support/files.js';

/** `fs.write` at an offset: in place, no truncation, never creating a file, under the same policy checks as every write. */
describe('fs.write at an offset', () => {
  let dir: string;
  let root: string;
  let outside: string;
  let socketPath: string;
  let secret: string;
  let server: AgentServer;
  const opened: Connection[] = [];
  const connect = async (policy?: FilePolicy) => {
    const connection = await Connection.open(
      `ws+unix://${socketPath}:/`,
      secret,
      5000,
      policy ? { 'x-warren-policy': encodeGrant({ policy, allowExec: false }) } : {},
    );
    opened.push(connection);
    return connection;
  };
  const writeAt = async (connection: Connection, file: string, offset: number, content: string | Buffer) =>
    (await connection.call('fs.write', { path: file, offset }, { payload: Buffer.from(content) })).result;
  const file = (name: string) => path.join(root, name);

  beforeAll(async () => {
    dir = await realpath(await mkdtemp(path.join(os.tmpdir(), 'warren-offset-')));
    root = path.join(dir, 'workspace');
    outside = path.join(dir, 'outside');
    await mkdir(root);
    await mkdir(outside);
    socketPath = path.join(dir, 'agent.sock');
    secret = randomBytes(32).toString('hex');
    server = await startAgentServer({ socketPath, secret, policy: { root, readOnly: false }, home: root });
  });
  afterAll(async () => {
    for (const c of opened) c.close();
    await server.close();
    await rm(dir, { recursive: true, force: true });
  });
  beforeEach(async () => {
    await writeFile(file('f.bin'), 'abcdefghij');
    await chmod(file('f.bin'), 0o640);
    await writeFile(path.join(outside, 'secret.txt'), 'outside\n');
  });

  it('writes in place: the bytes before and after stay, nothing is truncated, the mode is kept', async () => {
    const connection = await connect();
    expect(await writeAt(connection, 'f.bin', 3, 'XY')).toEqual({ path: 'f.bin', bytesWritten: 2, created: false });
    expect(await writeAt(connection, 'f.bin', 0, '')).toMatchObject({ bytesWritten: 0 });
    expect(await readFile(file('f.bin'), 'utf8')).toBe('abcXYfghij');
    expect((await stat(file('f.bin'))).mode & 0o777).toBe(0o640);
    // Overlapping the end extends the file.
    await writeAt(connection, 'f.bin', 8, '1234');
    expect(await readFile(file('f.bin'), 'utf8')).toBe('abcXYfgh1234');
  });

  it('an offset past the end extends the file, the gap reading as zero bytes; one past MAX_WRITE_GAP_BYTES is refused', async () => {
    const connection = await connect();
    await writeAt(connection, 'f.bin', 20, 'Z');
    expect(await readFile(file('f.bin'))).toEqual(Buffer.concat([Buffer.from('abcdefghij'), Buffer.alloc(10), Buffer.from('Z')]));
    const tooFar = connection.call('fs.write', { path: 'f.bin', offset: 21 + MAX_WRITE_GAP_BYTES + 1 }, { payload: Buffer.from('x') });
    const err = (await tooFar.catch((e: unknown) => e)) as WarrenError;
    expect(err.code).toBe('INVALID_PARAMS');
    expect(err.message).toContain('past the end');
    expect((await stat(file('f.bin'))).size).toBe(21);
  });

  it('never creates a file: a missing one is NOT_FOUND, at offset 0 too, and stays missing', async () => {
    const connection = await connect();
    for (const offset of [0, 5]) {
      const err = (await writeAt(connection, 'new/missing.bin', offset, 'x').catch((e: unknown) => e)) as WarrenError;
      expect(err.code).toBe('NOT_FOUND');
      expect(err.message).toContain('create it first');
    }
    expect(await readdir(root)).toEqual(['f.bin']);
  });

  it('refuses hostile offsets and clashing fields before touching the file', async () => {
    const hostile: Record<string, unknown>[] = [
      { offset: -1 },
      { offset: 1.5 },
      { offset: 2 ** 53 },
      { offset: '3' },
      { offset: null },
      { offset: 1e308 * 10 }, // Infinity: JSON turns it into null
      { offset: 2 ** 53 - 1 }, // valid JSON and integer, but far past the end
      { offset: 0, append: true },
      { offset: 0, mode: 0o777 },
      { offset: 0, overwrite: false },
      { offset: 0, expectedSha256: 'a'.repeat(64) },
    ];
    const answers = await rawCalls(hostile.map((extra) => ({ params: { path: 'f.bin', ...extra }, payload: Buffer.from('PWNED') })));
    expect(answers.map((a) => (a.type === 'err' ? a.error.code : a.type))).toEqual(hostile.map(() => 'INVALID_PARAMS'));
    expect(answers[7]!.type === 'err' && answers[7]!.error.message).toContain('cannot be combined with append');
    expect(await readFile(file('f.bin'), 'utf8')).toBe('abcdefghij');
  });

  it('goes through the policy: read-only grants, paths outside, links out, suffixes, size limits, hard links and non-files are refused', async () => {
    const connection = await connect();
    await symlink(path.join(outside, 'secret.txt'), file('out-link.txt'));
    await mkdir(file('folder'));
    try {
      expect(await codeOf(writeAt(connection, '../outside/secret.txt', 0, 'x'))).toBe('PATH_NOT_IN_SANDBOX');
      expect(await codeOf(writeAt(connection, path.join(outside, 'secret.txt'), 0, 'x'))).toBe('PATH_NOT_IN_SANDBOX');
      expect(await codeOf(writeAt(connection, 'out-link.txt', 0, 'x'))).toBe('PATH_NOT_IN_SANDBOX');
      expect(await codeOf(writeAt(connection, 'folder', 0, 'x'))).toBe('IS_A_DIRECTORY');

      const readOnly = await connect(narrowPolicy({ root, readOnly: false }, { inherit: true, readonly: true }));
      expect(await codeOf(writeAt(readOnly, 'f.bin', 0, 'x'))).toBe('PATH_NOT_WRITABLE');
      const suffixes = await connect({ root, readOnly: false, suffixes: ['.txt'] });
      expect(await codeOf(writeAt(suffixes, 'f.bin', 0, 'x'))).toBe('SUFFIX_NOT_ALLOWED');
      const limited = await connect({ root, readOnly: false, maxFileBytes: 12 });
      expect(await codeOf(writeAt(limited, 'f.bin', 8, 'xy'))).toBe('OK');
      expect(await codeOf(writeAt(limited, 'f.bin', 11, 'xy'))).toBe('FILE_TOO_LARGE');

      // A narrowed handle does not change a file in place through a hard link whose other name it may not write.
      await mkdir(file('w'));
      await link(file('f.bin'), file('w/hard.bin'));
      const narrow = await connect(narrowPolicy({ root, readOnly: false }, { allowRead: 'w', allowWrite: 'w' }));
      expect(await codeOf(writeAt(narrow, 'w/hard.bin', 0, 'x'))).toBe('PATH_NOT_IN_SANDBOX');
      expect(await readFile(file('f.bin'), 'utf8')).toBe('abcdefghxy');
      expect(await readFile(path.join(outside, 'secret.txt'), 'utf8')).toBe('outside\n');
    } finally {
      await rm(file('out-link.txt'));
      await rm(file('folder'), { recursive: true });
      await rm(file('w'), { recursive: true, force: true });
    }
  });

  /** Sends requests as raw frames, past the SDK's own schema check, and returns the agent's answers in order. */
  async function rawCalls(calls: { params: Record<string, unknown>; payload: Buffer }[]): Promise<FrameHeader[]> {
    const ws = new WebSocket(`ws+unix://${socketPath}:/`, { headers: { authorization: `Bearer ${secret}` } });
    const frames: FrameHeader[] = [];
    ws.on('message', (data: Buffer) => frames.push(decodeFrame(data).header));
    await new Promise((resolve) => ws.once('open', resolve));
    const got = (n: number) =>
      new Promise<void>((resolve) => {
        const check = () => (frames.length >= n ? resolve() : setTimeout(check, 5));
        check();
      });
    ws.send(encodeFrame({ type: 'hello', protocolVersion: PROTOCOL_VERSION }));
    await got(1);
    calls.forEach((call, i) => ws.send(encodeFrame({ type: 'req', id: i + 1, method: 'fs.write', params: call.params }, call.payload)));
    await got(calls.length + 1);
    ws.close();
    const answers = frames.slice(1) as (FrameHeader & { id: number })[];
    return answers.sort((a, b) => a.id - b.id);
  }
});
