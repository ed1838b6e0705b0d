import { lstat, mkdir, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { describe, expect, it } from '@jest/globals';
import { tar } from '../support/files.js';
import { startTestAgent } from '../support/fixtures.js';

// The daemon runs as root in a sandbox; what it creates must be the sandbox user's, as if the user
// had made it. These tests run as root with a sandbox user of 4321.
const OWNER = { uid: 4321, gid: 4322 };
const asRoot = process.getuid?.() === 0;

(asRoot ? describe : describe.skip)('files the daemon creates belong to the sandbox user', () => {
  const owned = async (root: string, rel: string) => {
    const info = await lstat(path.join(root, rel));
    return `${info.uid}:${info.gid}`;
  };
  const mine = `${OWNER.uid}:${OWNER.gid}`;

  it('write, edit, mkdir, copy and upload make files, folders and links of the sandbox user; a replaced file keeps its owner', async () => {
    await using agent = await startTestAgent({}, { owner: OWNER });
    await agent.files.write('deep/er/new.txt', 'hello');
    expect(await Promise.all(['deep', 'deep/er', 'deep/er/new.txt'].map((p) => owned(agent.root, p)))).toEqual([mine, mine, mine]);

    await writeFile(path.join(agent.root, 'roots.txt'), 'made by root');
    await agent.files.write('roots.txt', 'replaced');
    expect(await owned(agent.root, 'roots.txt')).toBe('0:0');
    await agent.files.edit('deep/er/new.txt', 'hello', 'edited');
    expect(await owned(agent.root, 'deep/er/new.txt')).toBe(mine);

    await agent.files.mkdir('a/b/c', { parents: true });
    expect(await Promise.all(['a', 'a/b', 'a/b/c'].map((p) => owned(agent.root, p)))).toEqual([mine, mine, mine]);

    await agent.files.copy('deep', 'copied/deep');
    expect(await Promise.all(['copied', 'copied/deep', 'copied/deep/er', 'copied/deep/er/new.txt'].map((p) => owned(agent.root, p)))).toEqual([
      mine,
      mine,
      mine,
      mine,
    ]);

    await agent.files.upload(
      'up',
      await tar([
        { header: { name: 'd/', type: 'directory', mode: 0o755 } },
        { header: { name: 'd/f.txt', mode: 0o644 }, data: 'x' },
        { header: { name: 'd/link', type: 'symlink', linkname: 'f.txt', mode: 0o777 } },
      ]),
    );
    expect(await Promise.all(['up', 'up/d', 'up/d/f.txt', 'up/d/link'].map((p) => owned(agent.root, p)))).toEqual([mine, mine, mine, mine]);

    await mkdir(path.join(agent.root, 'rootdir'));
    await agent.files.move('rootdir', 'moved');
    expect(await owned(agent.root, 'moved')).toBe('0:0');
  });
});
