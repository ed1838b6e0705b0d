import { afterAll, beforeAll, beforeEach, describe, expect, it } from '@jest/globals';
import { randomBytes } from 'node:crypto';
import { mkdir, mkdtemp, readdir, readFile, realpath, rm, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { startAgentServer, type AgentServer } from '@warren/agent';
import type { ApprovalRequest } from '@warren/protocol';
import { Connection, Files } from '@warren/sdk';
import { codeOf } from '../support/files.js';
import { archive, file, header } from '../support/tar-bytes.js';

/** Every name below a folder, recursively, hidden ones included, sorted. */
async function tree(folder: string): Promise<string[]> {
  const names = await readdir(folder, { recursive: true });
  return names.map(String).sort();
}

/** The error a call fails with; a call that succeeds fails the test. */
async function failure(call: Promise<unknown>): Promise<Error & { code: string }> {
  try {
    await call;
  } catch (err) {
    return err as Error & { code: string };
  }
  throw new Error('the call succeeded');
}

describe('multi-file writes under writeApproval ask once per file', () => {
  let dir: string;
  let out: string;
  let server: AgentServer;
  let connection: Connection;
  let files: Files;
  let asked: ApprovalRequest[];

  beforeAll(async () => {
    dir = await realpath(await mkdtemp(path.join(os.tmpdir(), 'warren-approval-each-')));
    out = path.join(dir, 'out');
    await mkdir(out);
    const socketPath = path.join(dir, 'agent.sock');
    const secret = randomBytes(32).toString('hex');
    server = await startAgentServer({
      socketPath,
      secret,
      policy: { paths: { out: { root: out, mode: 'rw', writeApproval: true, readApproval: false } } },
      home: dir,
      approvalTimeoutMs: 2000,
    });
    connection = await Connection.open(`ws+unix://${socketPath}:/`, secret);
    files = new Files(() => connection);
  });
  afterAll(async () => {
    connection.close();
    await server.close();
    await rm(dir, { recursive: true, force: true });
  });
  beforeEach(async () => {
    asked = [];
    connection.onApproval = (request) => {
      asked.push(request);
      return true;
    };
    await rm(out, { recursive: true, force: true });
    await mkdir(out);
  });

  const upload = archive(
    header({ name: 'proj/', flag: '5', mode: 0o755 }),
    file('proj/a.py', 'print(1)\n'),
    file('proj/run.sh', 'rm -rf /\n'),
    header({ name: 'proj/link', flag: '2', linkname: 'a.py' }),
  );

  it('an upload asks for the new folder and each folder, file and link it writes, before writing any', async () => {
    await files.upload('/out/up', upload);
    expect(asked).toEqual([
      { operation: 'upload', path: '/out/up', bytes: upload.length },
      { operation: 'upload', path: '/out/up/proj' },
      { operation: 'upload', path: '/out/up/proj/a.py', bytes: 9 },
      { operation: 'upload', path: '/out/up/proj/run.sh', bytes: 9 },
      { operation: 'upload', path: '/out/up/proj/link' },
    ]);
    expect(await readFile(path.join(out, 'up/proj/run.sh'), 'utf8')).toBe('rm -rf /\n');
  });

  it('one denied file refuses the whole upload, and nothing of it is written', async () => {
    connection.onApproval = (request) => {
      asked.push(request);
      return !request.path.endsWith('.sh');
    };
    const err = await failure(files.upload('/out/up', upload));
    expect(err).toMatchObject({ code: 'APPROVAL_DENIED', message: expect.stringContaining("upload of '/out/up/proj/run.sh' needs approval") });
    expect(err.message).toContain('Nothing of the upload was written');
    expect(asked.map((r) => r.path)).toEqual(['/out/up', '/out/up/proj', '/out/up/proj/a.py', '/out/up/proj/run.sh']);
    expect(await tree(out)).toEqual([]);
  });

  it('an upload into an existing folder does not ask for the folder or for folders that exist', async () => {
    await mkdir(path.join(out, 'up/proj'), { recursive: true });
    await files.upload('/out/up', upload);
    expect(asked.map((r) => r.path)).toEqual(['/out/up/proj/a.py', '/out/up/proj/run.sh', '/out/up/proj/link']);
  });

  it('a folder copy asks for the new folder and each folder, file and link in it; one deny leaves nothing', async () => {
    await mkdir(path.join(out, 'src/sub'), { recursive: true });
    await writeFile(path.join(out, 'src/a.txt'), 'a');
    await writeFile(path.join(out, 'src/sub/b.sh'), 'bb');
    asked = [];
    await files.copy('/out/src', '/out/dst');
    expect(asked.sort((x, y) => x.path.localeCompare(y.path))).toEqual([
      { operation: 'copy', path: '/out/dst' },
      { operation: 'copy', path: '/out/dst/a.txt', bytes: 1 },
      { operation: 'copy', path: '/out/dst/sub' },
      { operation: 'copy', path: '/out/dst/sub/b.sh', bytes: 2 },
    ]);
    expect(await readFile(path.join(out, 'dst/sub/b.sh'), 'utf8')).toBe('bb');

    connection.onApproval = (request) => !request.path.endsWith('.sh');
    expect(await codeOf(files.copy('/out/src', '/out/dst2'))).toBe('APPROVAL_DENIED');
    expect(await tree(out)).toEqual(['dst', 'dst/a.txt', 'dst/sub', 'dst/sub/b.sh', 'src', 'src/a.txt', 'src/sub', 'src/sub/b.sh']);
  });

  it('a file copy asks once, for the file it writes', async () => {
    await writeFile(path.join(out, 'one.txt'), 'one');
    await files.copy('/out/one.txt', '/out/two.txt');
    expect(asked).toEqual([{ operation: 'copy', path: '/out/two.txt', bytes: 3 }]);
  });

  it('an upload that fails mid-way is undone: replaced files are back and nothing new is left', async () => {
    await writeFile(path.join(out, 'keep.txt'), 'old');
    const bytes = archive(file('keep.txt', 'new'), file('added.txt', 'added'), header({ name: 'd/', flag: '5' }), file('d/e.txt', 'e'), file('z.txt', 'z'));
    // The approver of the last entry races the upload: it puts a file where the archive's folder
    // `d` goes, after the checks saw nothing there, so the write fails at `d`, after keep.txt was
    // replaced and added.txt written.
    connection.onApproval = async (request) => {
      if (request.path === '/out/z.txt') await writeFile(path.join(out, 'd'), 'in the way');
      return true;
    };
    const err = await failure(files.upload('/out', bytes, { overwrite: true }));
    expect(err.message).toContain("was undone: '/out' is as it was");
    expect(await readFile(path.join(out, 'keep.txt'), 'utf8')).toBe('old');
    expect(await tree(out)).toEqual(['d', 'keep.txt']);
  });

  it('a name that appears between the checks and the write is never replaced unseen', async () => {
    const bytes = archive(file('a.txt', 'from the archive'), file('b.txt', 'b'));
    connection.onApproval = async (request) => {
      if (request.path === '/out/b.txt') await writeFile(path.join(out, 'a.txt'), 'written meanwhile');
      return true;
    };
    expect(await codeOf(files.upload('/out', bytes))).toBe('ALREADY_EXISTS');
    expect(await readFile(path.join(out, 'a.txt'), 'utf8')).toBe('written meanwhile');
    expect(await tree(out)).toEqual(['a.txt']);
  });
});
