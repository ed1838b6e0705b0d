import { mkdtempSync, rmSync, utimesSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterAll, describe, expect, it } from '@jest/globals';
import { OwnerNames } from '../src/services/owner-names.js';

describe('OwnerNames', () => {
  const dir = mkdtempSync(path.join(os.tmpdir(), 'owner-names-'));
  const passwd = path.join(dir, 'passwd');
  const group = path.join(dir, 'group');
  afterAll(() => rmSync(dir, { recursive: true, force: true }));

  it('names ids from passwd and group, the first name of an id wins, and an unnamed id is its number', () => {
    writeFileSync(passwd, 'root:x:0:0:root:/root:/bin/bash\nuser:x:1000:1000::/home/user:/bin/bash\nalias:x:1000:1000::/:/bin/sh\n');
    writeFileSync(group, 'root:x:0:\nusers:x:1000:\n');
    const names = new OwnerNames(passwd, group);
    expect([names.user(0), names.user(1000), names.user(4242)]).toEqual(['root', 'user', '4242']);
    expect([names.group(1000), names.group(7)]).toEqual(['users', '7']);
  });

  it('reads a changed file again, at most once per second', () => {
    let now = 0;
    writeFileSync(passwd, 'first:x:1000:1000::/:/bin/sh\n');
    utimesSync(passwd, 1, 1);
    const names = new OwnerNames(passwd, group, () => now);
    expect(names.user(1000)).toBe('first');
    writeFileSync(passwd, 'second:x:1000:1000::/:/bin/sh\n');
    utimesSync(passwd, 2, 2);
    expect(names.user(1000)).toBe('first');
    now += 1000;
    expect(names.user(1000)).toBe('second');
  });

  it('answers numbers when the files are missing', () => {
    const names = new OwnerNames(path.join(dir, 'none'), path.join(dir, 'none'));
    expect([names.user(1000), names.group(1000)]).toEqual(['1000', '1000']);
  });
});
