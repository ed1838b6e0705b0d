import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import { randomBytes } from 'node:crypto';
import { link, mkdir, mkdtemp, readFile, realpath, rm, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { startAgentServer, type AgentServer } from '@warren/agent';
import { decodeFrame, encodeFrame, encodeGrant, narrowPolicy, PROTOCOL_VERSION, type FilePolicy } from '@warren/protocol';
import { WebSocket } from 'ws';
import { Commands, Connection, Files, WarrenError } from '@warren/sdk';
import { codeOf } from '../support/files.js';

const filesOf = (c: Connection) => new Files(() => c);
const commandsOf = (c: Connection) => new Commands(() => c);

describe('per-connection policy, approval and audit', () => {
  let dir: string;
  let root: string;
  let server: AgentServer;
  let secret: string;
  let socketPath: string;
  const opened: Connection[] = [];
  const connect = async (grant?: Parameters<typeof encodeGrant>[0]) => {
    const connection = await Connection.open(`ws+unix://${socketPath}:/`, secret, 5000, grant ? { 'x-warren-policy': encodeGrant(grant) } : {});
    opened.push(connection);
    return connection;
  };

  beforeAll(async () => {
    dir = await realpath(await mkdtemp(path.join(os.tmpdir(), 'warren-files-policy-')));
    root = path.join(dir, 'workspace');
    await mkdir(path.join(root, 'src'), { recursive: true });
    await mkdir(path.join(root, 'out'), { recursive: true });
    await mkdir(path.join(root, 'data'), { recursive: true });
    await writeFile(path.join(root, 'src/a.py'), 'print(1)\n');
    await writeFile(path.join(root, 'top.txt'), 'top\n');
    await writeFile(path.join(root, 'data/d.csv'), 'a,b\n');
    socketPath = path.join(dir, 'agent.sock');
    secret = randomBytes(32).toString('hex');
    server = await startAgentServer({ socketPath, secret, policy: { root, readOnly: false }, home: root, approvalTimeoutMs: 500 });
  });
  afterAll(async () => {
    for (const c of opened) c.close();
    await server.close();
    await rm(dir, { recursive: true, force: true });
  });

  it('enforces the narrowed grant of the x-warren-policy header, and refuses exec without allowExec', async () => {
    const child = narrowPolicy({ root, readOnly: false }, { allowRead: 'src', allowWrite: 'out' });
    const files = filesOf(await connect({ policy: child, allowExec: false }));
    expect(await files.read('src/a.py')).toBe('print(1)\n');
    expect(await codeOf(files.write('src/a.py', 'x'))).toBe('PATH_NOT_WRITABLE');
    expect(await codeOf(files.read('top.txt'))).toBe('PATH_NOT_IN_SANDBOX');
    await files.write('out/r.txt', 'result');
    const err = await files.read('top.txt').catch((e: unknown) => e as WarrenError);
    expect((err as WarrenError).message).toContain(`Readable: ${root}/src, ${root}/out`);
    expect((err as WarrenError).message).toContain(`Writable: ${root}/out`);
    const commands = commandsOf(await connect({ policy: child, allowExec: false }));
    expect(await codeOf(commands.run('cat top.txt'))).toBe('FORBIDDEN');
    // A connection without the header keeps the agent's own policy.
    expect(await filesOf(await connect()).read('top.txt')).toBe('top\n');
  });

  it('a narrowed handle does not read a hard link whose other name is outside its paths', async () => {
    await link(path.join(root, 'top.txt'), path.join(root, 'src/hard.txt'));
    const child = narrowPolicy({ root, readOnly: false }, { allowRead: 'src' });
    const files = filesOf(await connect({ policy: child, allowExec: false }));
    expect(await codeOf(files.read('src/hard.txt'))).toBe('PATH_NOT_IN_SANDBOX');
    expect(await codeOf(files.readChars('src/hard.txt', { offset: 0 }))).toBe('PATH_NOT_IN_SANDBOX');
    expect(await codeOf(files.download('src'))).toBe('PATH_NOT_IN_SANDBOX');
    expect(await files.read('src/a.py')).toBe('print(1)\n');
  });

  it('applies suffix and size limits to every way in and out: read, write, copy, move, glob, download', async () => {
    await mkdir(path.join(root, 'sfx/dir'), { recursive: true });
    await writeFile(path.join(root, 'sfx/secret.env'), 'KEY=1');
    await writeFile(path.join(root, 'sfx/dir/inner.env'), 'KEY=2');
    await writeFile(path.join(root, 'sfx/dir/ok.txt'), 'ok');
    const files = filesOf(await connect({ policy: { root, readOnly: false, suffixes: ['.txt', '.tar.gz'], maxFileBytes: 10 }, allowExec: false }));
    expect(await codeOf(files.read('sfx/secret.env'))).toBe('SUFFIX_NOT_ALLOWED');
    expect(await codeOf(files.write('sfx/new.env', 'x'))).toBe('SUFFIX_NOT_ALLOWED');
    expect(await codeOf(files.copy('sfx/secret.env', 'sfx/copied.txt'))).toBe('SUFFIX_NOT_ALLOWED');
    expect(await codeOf(files.move('sfx/secret.env', 'sfx/moved.txt'))).toBe('SUFFIX_NOT_ALLOWED');
    expect(await codeOf(files.write('sfx/big.txt', 'x'.repeat(11)))).toBe('FILE_TOO_LARGE');
    await files.write('sfx/a.tar.gz', 'ok');
    const copied = await files.copy('sfx/dir', 'sfx/dir2');
    expect(copied.skipped).toEqual([{ path: 'inner.env', reason: 'suffix not allowed' }]);
    expect(await files.glob('sfx', '**/*')).toEqual(['a.tar.gz', 'dir/ok.txt', 'dir2/ok.txt']);
    expect((await files.download('sfx/dir')).entries.map((e) => e.name)).toEqual(['ok.txt']);
    const err = await files.read('sfx/secret.env').catch((e: unknown) => e as WarrenError);
    expect((err as WarrenError).message).toContain('.txt, .tar.gz');
    expect((err as WarrenError).message).toContain('files up to 10 bytes');
  });

  it('refuses a NUL byte in a path sent raw, past the SDK, with a typed error', async () => {
    const ws = new WebSocket(`ws+unix://${socketPath}:/`, { headers: { authorization: `Bearer ${secret}` } });
    const frames: unknown[] = [];
    const got = (n: number) =>
      new Promise<void>((resolve) => {
        const check = () => (frames.length >= n ? resolve() : setTimeout(check, 5));
        check();
      });
    ws.on('message', (data: Buffer) => frames.push(decodeFrame(data).header));
    await new Promise((resolve) => ws.once('open', resolve));
    ws.send(encodeFrame({ type: 'hello', protocolVersion: PROTOCOL_VERSION }));
    await got(1);
    ws.send(encodeFrame({ type: 'req', id: 1, method: 'fs.read', params: { path: '../../etc/passwd\0.txt' } }));
    ws.send(encodeFrame({ type: 'req', id: 2, method: 'fs.write', params: { path: 'a\0/../../x' } }, Buffer.from('x')));
    await got(3);
    ws.close();
    expect(frames.slice(1)).toEqual([
      expect.objectContaining({ type: 'err', id: 1, error: expect.objectContaining({ code: 'INVALID_PARAMS' }) }),
      expect.objectContaining({ type: 'err', id: 2, error: expect.objectContaining({ code: 'INVALID_PARAMS' }) }),
    ]);
  });

  it('refuses an upgrade whose grant header is not a valid grant', async () => {
    await expect(Connection.open(`ws+unix://${socketPath}:/`, secret, 5000, { 'x-warren-policy': 'bm90IGpzb24' })).rejects.toBeInstanceOf(WarrenError);
  });

  describe('named paths with approvals (seed 001)', () => {
    let policy: FilePolicy;
    beforeAll(() => {
      policy = {
        paths: {
          data: { root: path.join(root, 'data'), mode: 'ro', readApproval: true, writeApproval: false },
          out: { root: path.join(root, 'out'), mode: 'rw', readApproval: false, writeApproval: true },
        },
      };
    });

    it('maps /name/... to its folder and denies without a handler, leaving the file as it was', async () => {
      const connection = await connect({ policy, allowExec: false });
      const files = filesOf(connection);
      expect(await codeOf(files.read('/data/d.csv'))).toBe('APPROVAL_DENIED');
      expect(await codeOf(files.write('/out/x.txt', 'x'))).toBe('APPROVAL_DENIED');
      expect(await codeOf(files.write('/data/x.txt', 'x'))).toBe('PATH_NOT_WRITABLE');
      expect(await codeOf(files.read('/src/a.py'))).toBe('PATH_NOT_IN_SANDBOX');
      await expect(readFile(path.join(root, 'out/x.txt'))).rejects.toThrow();
    });

    it('asks onApproval with the operation and path; allow, deny, a throw and no answer in time', async () => {
      const connection = await connect({ policy, allowExec: false });
      const files = filesOf(connection);
      const asked: unknown[] = [];
      connection.onApproval = (request, method) => {
        asked.push({ ...request, method });
        return request.path === '/data/d.csv' || request.path === '/out/ok.txt';
      };
      expect(await files.read('/data/d.csv')).toBe('a,b\n');
      await files.write('/out/ok.txt', 'ok');
      expect(await readFile(path.join(root, 'out/ok.txt'), 'utf8')).toBe('ok');
      expect(await codeOf(files.write('/out/no.txt', 'no'))).toBe('APPROVAL_DENIED');
      expect(asked).toEqual([
        { operation: 'read', path: '/data/d.csv', method: 'fs.read' },
        { operation: 'write', path: '/out/ok.txt', bytes: 2, method: 'fs.write' },
        { operation: 'write', path: '/out/no.txt', bytes: 2, method: 'fs.write' },
      ]);
      connection.onApproval = () => {
        throw new Error('handler broke');
      };
      expect(await codeOf(files.write('/out/ok.txt', 'again'))).toBe('APPROVAL_DENIED');
      connection.onApproval = () => new Promise<boolean>(() => undefined);
      expect(await codeOf(files.write('/out/ok.txt', 'late'))).toBe('APPROVAL_DENIED');
      expect(await readFile(path.join(root, 'out/ok.txt'), 'utf8')).toBe('ok');
    });
  });

  it('records every served call in the audit log, with paths, outcome, bytes and duration', async () => {
    const connection = await connect();
    const files = filesOf(connection);
    const before = (await connection.call('audit.list', {})).result.lastSeq;
    await files.write('audit/a.txt', 'hello');
    await files.read('audit/a.txt');
    await files.read('/etc/passwd').catch(() => undefined);
    await files.move('audit/a.txt', 'audit/b.txt');
    const { result } = await connection.call('audit.list', { since: before });
    expect(result.entries.map((e) => [e.method, e.paths, e.outcome])).toEqual([
      ['fs.write', ['audit/a.txt'], 'ok'],
      ['fs.read', ['audit/a.txt'], 'ok'],
      ['fs.read', ['/etc/passwd'], 'PATH_NOT_IN_SANDBOX'],
      ['fs.move', ['audit/a.txt', 'audit/b.txt'], 'ok'],
    ]);
    expect(result.entries[0]).toMatchObject({ bytesIn: 5, bytesOut: 0 });
    expect(result.entries[1]).toMatchObject({ bytesIn: 0, bytesOut: 5 });
    expect(result.entries.every((e) => e.durationMs >= 0 && !Number.isNaN(Date.parse(e.time)))).toBe(true);
    expect(result.dropped).toBe(false);
  });
});
