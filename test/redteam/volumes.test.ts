import { randomBytes } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import { Sandbox, Volumes } from '@warren/sdk';
import { tar } from '../support/files.js';
import { startTestController, type TestController, tenantCredentials } from '../support/fixtures.js';
import { DaemonIdentity, HostSentinel, sandboxCode } from '../support/redteam.js';

/**
 * Named volumes as a door between sandboxes: one volume mounted by two sandboxes of different
 * grants (one writable, one read-only and read through a narrowed handle), used by sandbox code to
 * pass links, FIFOs and swapped folders across, to remount its read-only mount, and to fill the
 * volume so the controller trips on reading it back; hostile volume names, reserved targets and
 * another key's volume from a hostile client.
 */
describe('red team: named volumes shared by sandboxes', () => {
  let warren: TestController;
  const apiKey = `wk_test_${randomBytes(16).toString('hex')}`;
  const otherKey = `wk_other_${randomBytes(16).toString('hex')}`;
  let sentinel: HostSentinel;
  const options = (key = apiKey) => ({ baseUrl: warren.url, apiKey: key, ttlSeconds: 600 });

  beforeAll(async () => {
    warren = await startTestController({ credentials: await tenantCredentials(apiKey, [otherKey]) });
    warren = { ...warren, apiKey };
    sentinel = await HostSentinel.make();
  }, 60_000);

  afterAll(async () => {
    await warren?.[Symbol.asyncDispose]();
    await sentinel?.remove();
  }, 60_000);

  it('links, FIFOs and swapped folders planted by a writer never let a narrowed reader of the same volume out of its folder; the read-only side stays read-only', async () => {
    const volumes = new Volumes(options());
    await volumes.create({ name: 'crossing', sizeMb: 64 });
    const writer = await Sandbox.create({ ...options(), volumes: [{ name: 'crossing', path: '/workspace/shared' }] });
    const reader = await Sandbox.create({ ...options(), volumes: [{ name: 'crossing', path: '/workspace/shared', readOnly: true }] });
    const daemon = await DaemonIdentity.of(reader);
    await sandboxCode(
      reader,
      'echo READER-PRIVATE > /workspace/private.txt; mkdir -p /workspace/secret && echo READER-SECRET > /workspace/secret/s.txt; echo ok=1',
    );
    // The writer plants, in the shared volume, links that resolve inside the reader's own
    // container to the reader's private files, its daemon's folder and the host sentinel's path,
    // a FIFO nobody writes, and a folder it keeps swapping for a link to the reader's secret folder.
    const planted = await sandboxCode(
      writer,
      `cd /workspace/shared && ln -s /workspace/private.txt peek && ln -s ../private.txt peek-rel && ln -s /run/warren/secret daemon-secret
       ln -s ${sentinel.path} host && mkfifo fifo && mkdir d && echo visible > d/v.txt; echo planted=$?`,
    );
    expect(planted.facts.planted).toBe('0');
    const swapper = await writer.commands.start(
      `cd /workspace/shared && while :; do rm -rf d; ln -s /workspace/secret d; rm -f d; mkdir d; echo visible > d/v.txt; done`,
    );
    const { token } = await reader.deriveToken({ allowRead: ['/workspace/shared'], readonly: true });
    const narrow = await Sandbox.connect(reader.id, { baseUrl: warren.url, token });
    try {
      for (const name of ['peek', 'peek-rel', 'daemon-secret', 'host'])
        await expect(narrow.files.read(`/workspace/shared/${name}`)).rejects.toMatchObject({
          code: expect.stringMatching(/^(PATH_NOT_IN_SANDBOX|NOT_FOUND|PERMISSION_DENIED)$/),
        });
      // A FIFO is refused at once instead of blocking the daemon on an open nobody completes.
      const started = Date.now();
      await expect(narrow.files.read('/workspace/shared/fifo')).rejects.toMatchObject({ code: expect.any(String) });
      expect(Date.now() - started).toBeLessThan(5_000);
      // While the folder is swapped as fast as a shell can, no read through it carries the secret.
      let leaked = false;
      for (let i = 0; i < 200; i++) {
        const text = await narrow.files.read('/workspace/shared/d/s.txt').catch(() => '');
        if (String(text).includes('READER-SECRET')) leaked = true;
        const listing = await narrow.files.list('/workspace/shared/d').catch(() => []);
        if (JSON.stringify(listing).includes('s.txt')) leaked = true;
      }
      expect(leaked).toBe(false);
    } finally {
      narrow.close();
      await swapper.kill();
    }
    // The read-only side: no write, no remount, no change of modes, through commands or the file API.
    const ro = await sandboxCode(
      reader,
      `touch /workspace/shared/x; echo "touch=$?"
       mount -o remount,rw /workspace/shared 2>/dev/null; echo "remount=$?"
       chmod 777 /workspace/shared/fifo 2>/dev/null; echo "chmod=$?"
       rm -f /workspace/shared/peek; echo "rm=$?"`,
    );
    expect(ro.facts).toMatchObject({ touch: '1', chmod: '1', rm: '1' });
    expect(ro.facts.remount).not.toBe('0');
    await expect(reader.files.write('/workspace/shared/api.txt', 'x')).rejects.toMatchObject({ code: expect.any(String) });
    expect((await sandboxCode(writer, 'ls /workspace/shared/x /workspace/shared/api.txt 2>/dev/null | wc -l | sed s/^/count=/')).facts.count).toBe('0');
    await daemon.expectSame(reader);
    await sentinel.expectUnchanged();
    await writer.kill();
    await reader.kill();
    await volumes.delete('crossing');
  }, 180_000);

  it('another sandbox swapping a shared folder for a link never leads a narrowed handle’s deletes, moves and writes to files outside its grant', async () => {
    // The writer's link resolves in the victim's container, to the victim's private folder: a
    // by-path unlink or rename there (checked, then done by path) deleted victim files the
    // handle was not given, which the writer itself could never reach. Now each is done in its
    // folder pinned by a descriptor.
    const volumes = new Volumes(options());
    await volumes.create({ name: 'race', sizeMb: 64 });
    const attacker = await Sandbox.create({ ...options(), volumes: [{ name: 'race', path: '/workspace/shared' }] });
    const victim = await Sandbox.create({ ...options(), volumes: [{ name: 'race', path: '/workspace/shared' }] });
    try {
      await sandboxCode(victim, 'mkdir -p /workspace/private && for i in $(seq 0 40); do echo precious > /workspace/private/x$i; done; echo ok=1');
      await sandboxCode(attacker, 'mkdir -p /workspace/shared/sub; echo ok=1');
      const swapper = await attacker.commands.start(
        `cd /workspace/shared && while :; do mv sub real 2>/dev/null; ln -sfn /workspace/private sub; rm -f sub; mv real sub 2>/dev/null || mkdir -p sub; done`,
      );
      const { token } = await victim.deriveToken({ allowRead: ['/workspace/shared'], allowWrite: ['/workspace/shared'] });
      const narrow = await Sandbox.connect(victim.id, { baseUrl: warren.url, token });
      // Four clients at once, each writing, deleting and moving names in the swapped folder.
      const end = Date.now() + 12_000;
      let calls = 0;
      await Promise.all(
        [0, 1, 2, 3].map(async (worker) => {
          for (let i = worker; Date.now() < end; i += 4) {
            const n = i % 41;
            // Refusals and NOT_FOUND are the expected answers while the folder is swapped.
            await narrow.files.write(`/workspace/shared/sub/x${n}`, 'from-handle').catch(() => undefined);
            await narrow.files.delete(`/workspace/shared/sub/x${n}`).catch(() => undefined);
            await narrow.files.move(`/workspace/shared/sub/x${(n + 1) % 41}`, `/workspace/shared/sub/x${n}`, { overwrite: true }).catch(() => undefined);
            calls += 3;
          }
        }),
      );
      await swapper.kill();
      // A recursive delete of a tree in the volume while a folder inside it is swapped for the link.
      const inner = await attacker.commands.start(
        `cd /workspace/shared && while :; do mv t/in t/real 2>/dev/null && ln -sfn /workspace/private t/in && rm -f t/in && mv t/real t/in; done`,
      );
      const treeEnd = Date.now() + 8_000;
      let trees = 0;
      while (Date.now() < treeEnd) {
        for (let k = 0; k < 20; k++) await narrow.files.write(`/workspace/shared/t/in/x${k}`, 'tree').catch(() => undefined);
        await narrow.files.delete('/workspace/shared/t', { recursive: true }).catch(() => undefined);
        trees++;
      }
      await inner.kill();
      narrow.close();
      const after = await sandboxCode(victim, 'echo "left=$(ls /workspace/private | wc -l)"; echo "changed=$(grep -L precious /workspace/private/* | wc -l)"');
      expect(calls).toBeGreaterThan(300);
      expect(trees).toBeGreaterThan(5);
      expect(after.facts).toMatchObject({ left: '41', changed: '0' });
    } finally {
      await attacker.kill();
      await victim.kill();
      await volumes.delete('race');
    }
  }, 180_000);

  it('another sandbox swapping a shared folder for a link never leads a narrowed handle’s writes with missing parents, mkdir -p, uploads or copies to make anything outside its grant', async () => {
    // Making missing parent folders by path (mkdir -p after the policy check) followed the link
    // the attacker swapped in, which resolves in the victim's container to the victim's private
    // folder: folders landed there, outside the handle's grant. Now each folder is made through
    // its parent's descriptor, and a link on the way is refused.
    const volumes = new Volumes(options());
    await volumes.create({ name: 'parents', sizeMb: 64 });
    const attacker = await Sandbox.create({ ...options(), volumes: [{ name: 'parents', path: '/workspace/shared' }] });
    const victim = await Sandbox.create({ ...options(), volumes: [{ name: 'parents', path: '/workspace/shared' }] });
    try {
      await sandboxCode(victim, 'mkdir -p /workspace/private && for i in $(seq 0 9); do echo precious > /workspace/private/x$i; done; echo ok=1');
      await sandboxCode(attacker, 'mkdir -p /workspace/shared/sub && echo source > /workspace/shared/src.txt; echo ok=1');
      // The link is there half of the time and the real folder the other half: the race is won
      // often, not once in a while, and calls that fall between two swaps go through.
      const swapper = await attacker.commands.start([
        'python3',
        '-c',
        [
          'import os, time',
          'os.chdir("/workspace/shared")',
          'while not os.path.exists("/workspace/stop"):',
          '    try:',
          '        os.rename("sub", "real"); os.symlink("/workspace/private", "sub"); time.sleep(0.0005); os.unlink("sub"); os.rename("real", "sub"); time.sleep(0.0005)',
          '    except OSError:',
          '        os.makedirs("sub", exist_ok=True)',
          'if os.path.islink("sub"): os.unlink("sub")',
          'if os.path.isdir("real") and not os.path.exists("sub"): os.rename("real", "sub")',
          'os.makedirs("sub", exist_ok=True)',
        ].join('\n'),
      ]);
      const { token } = await victim.deriveToken({ allowRead: ['/workspace/shared'], allowWrite: ['/workspace/shared'] });
      const narrow = await Sandbox.connect(victim.id, { baseUrl: warren.url, token });
      const archive = await tar([{ header: { name: 'u/', type: 'directory', mode: 0o755 } }, { header: { name: 'u/f.txt', mode: 0o644 }, data: 'up' }]);
      const end = Date.now() + 15_000;
      let calls = 0;
      let refusedAsSwap = 0;
      let succeeded = 0;
      const ok = () => {
        succeeded++;
      };
      const note = (err: unknown) => {
        if ((err as { code?: string }).code === 'PATH_NOT_IN_SANDBOX') refusedAsSwap++;
      };
      await Promise.all(
        [0, 1, 2, 3].map(async (worker) => {
          for (let k = worker; Date.now() < end; k += 4) {
            // A few names again and again: thousands of new folders would fill the volume's inodes.
            const i = k % 25;
            // Refusals and NOT_FOUND are the expected answers while the folder is swapped.
            await narrow.files.write(`/workspace/shared/sub/w${i}/deep/f.txt`, 'from-handle').then(ok, note);
            await narrow.files.mkdir(`/workspace/shared/sub/m${i}/deeper`, { parents: true }).then(ok, note);
            await narrow.files.copy('/workspace/shared/src.txt', `/workspace/shared/sub/c${i}/x.txt`).then(ok, note);
            await narrow.files.upload(`/workspace/shared/sub/t${i}`, archive).then(ok, note);
            await narrow.files
              .upload(
                `/workspace/shared/sub/s${i}`,
                (async function* () {
                  yield archive;
                })(),
              )
              .then(ok, note);
            calls += 5;
          }
        }),
      );
      // Once the swapping stops (and the swapper put its folder back), each call goes through, through the same descriptor walks.
      await sandboxCode(attacker, 'touch /workspace/stop; echo ok=1');
      await swapper.wait({ timeoutMs: 30_000 });
      await narrow.files.write('/workspace/shared/sub/after/deep/f.txt', 'from-handle');
      await narrow.files.mkdir('/workspace/shared/sub/after-m/deeper', { parents: true });
      await narrow.files.copy('/workspace/shared/src.txt', '/workspace/shared/sub/after-c/x.txt');
      await narrow.files.upload('/workspace/shared/sub/after-t', archive);
      await narrow.files.upload(
        '/workspace/shared/sub/after-s',
        (async function* () {
          yield archive;
        })(),
      );
      const made = await sandboxCode(
        attacker,
        'cd /workspace/shared/sub && echo "w=$(cat after/deep/f.txt)"; echo "c=$(cat after-c/x.txt)"; echo "t=$(cat after-t/u/f.txt)"; echo "s=$(cat after-s/u/f.txt)"; [ -d after-m/deeper ] && echo deeper=1; stat -c owner=%u after/deep',
      );
      expect(made.facts).toMatchObject({ w: 'from-handle', c: 'source', t: 'up', s: 'up', deeper: '1', owner: '1000' });
      narrow.close();
      const after = await sandboxCode(
        victim,
        'echo "entries=$(find /workspace/private -mindepth 1 | wc -l)"; echo "changed=$(grep -L precious /workspace/private/x* | wc -l)"; echo "foreign=$(find /workspace/private -mindepth 1 ! -name "x[0-9]" | head -3 | tr "\n" " ")"',
      );
      expect(calls).toBeGreaterThan(100);
      expect(after.facts).toMatchObject({ entries: '10', changed: '0', foreign: '' });
      // Some calls did their work between swaps, and a swap was refused with a typed error, not slipped through unseen.
      expect(succeeded).toBeGreaterThan(0);
      expect(refusedAsSwap).toBeGreaterThan(0);
    } finally {
      await attacker.kill();
      await victim.kill();
      await volumes.delete('parents');
    }
  }, 180_000);

  it('a set-user-id program planted in a shared volume by one sandbox user runs with no one else’s identity in a sandbox of another user', async () => {
    const volumes = new Volumes(options());
    await volumes.create({ name: 'setuid', sizeMb: 64 });
    const planter = await Sandbox.create({ ...options(), volumes: [{ name: 'setuid', path: '/data' }] });
    const victim = await Sandbox.create({ ...options(), user: '2000:2000', volumes: [{ name: 'setuid', path: '/data' }] });
    try {
      const plant = await sandboxCode(
        planter,
        `cp "$(readlink -f "$(command -v python3)")" /data/py && chmod 6755 /data/py && chmod 777 /data; echo "mode=$(stat -c %a /data/py)"; echo "owner=$(stat -c %u /data/py)"`,
      );
      expect(plant.facts).toMatchObject({ owner: '1000', mode: '6755' });
      const run = await sandboxCode(victim, `/data/py -c "import os; print('ids=%d,%d' % (os.getuid(), os.geteuid()))"; echo "rc=$?"`);
      // No new privileges (and nosuid where the volume is an image): the set-user-id bit gives nothing.
      expect(run.facts.ids).toBe('2000,2000');
    } finally {
      await planter.kill();
      await victim.kill();
      await volumes.delete('setuid');
    }
    await sentinel.expectUnchanged();
  }, 120_000);

  it('a volume filled to the last block, locked and crowded by its sandbox is still described, deleted and reclaimed by the controller', async () => {
    const volumes = new Volumes(options());
    const made = await volumes.create({ name: 'filled', sizeMb: 32 });
    {
      await using filler = await Sandbox.create({ ...options(), volumes: [{ name: 'filled', path: '/data' }] });
      await using neighbour = await Sandbox.create({ ...options(), volumes: [{ name: 'filled', path: '/data' }] });
      const fill = await sandboxCode(
        filler,
        `mkdir /data/many && cd /data/many && i=0; while [ $i -lt 3000 ]; do : > f$i; i=$((i+1)); done
         dd if=/dev/zero of=/data/big bs=1M count=64 2>/dev/null; echo "dd=$?"
         ln -s / /data/root-link; mkfifo /data/fifo; chmod 000 /data/many; chmod 000 /data; echo "locked=$?"`,
      );
      if (made.quota) expect(fill.facts.dd).not.toBe('0');
      expect(fill.facts.locked).toBe('0');
      // The neighbour cannot write the full volume but keeps its own workspace.
      const own = await sandboxCode(neighbour, `echo x > /workspace/own.txt; echo "own=$?"`);
      expect(own.facts.own).toBe('0');
      const described = await volumes.get('filled');
      expect(described.sandboxes.sort()).toEqual([filler.id, neighbour.id].sort());
      if (made.quota) expect(described.usedBytes).toBeGreaterThan(16 * 1024 * 1024);
    }
    await volumes.delete('filled');
    expect(await volumes.list()).toEqual([]);
    // The name can be used again, empty.
    await volumes.create({ name: 'filled', sizeMb: 32 });
    {
      await using again = await Sandbox.create({ ...options(), volumes: [{ name: 'filled', path: '/data' }] });
      expect((await sandboxCode(again, 'echo "entries=$(ls -A /data | wc -l)"')).facts.entries).toBe('0');
    }
    await volumes.delete('filled');
    await sentinel.expectUnchanged();
  }, 180_000);

  it("refuses names that point elsewhere, reserved targets, and another key's volume", async () => {
    const volumes = new Volumes(options());
    for (const name of ['../../etc', '/var/lib/docker', 'a/b', '..', '.x'])
      await expect(volumes.create({ name })).rejects.toMatchObject({ code: 'INVALID_PARAMS' });
    await volumes.create({ name: 'mine' });
    for (const target of ['/opt/warren', '/workspace', '/', '/run/warren', '/workspace/..', '/proc/x'])
      await expect(Sandbox.create({ ...options(), volumes: [{ name: 'mine', path: target }] })).rejects.toMatchObject({ code: 'FORBIDDEN' });
    await expect(Sandbox.create({ ...options(), volumes: [{ name: '../mine', path: '/data' }] })).rejects.toMatchObject({ code: 'INVALID_PARAMS' });
    const other = options(otherKey);
    await expect(Sandbox.create({ ...other, volumes: [{ name: 'mine', path: '/data' }] })).rejects.toMatchObject({ code: 'VOLUME_NOT_FOUND' });
    await expect(new Volumes(other).delete('mine')).rejects.toMatchObject({ code: 'VOLUME_NOT_FOUND' });
    await expect(new Volumes(other).get('mine')).rejects.toMatchObject({ code: 'VOLUME_NOT_FOUND' });
    expect(await new Volumes(other).list()).toEqual([]);
    // An admin of another tenant reaches it only by naming its tenant; a member key never does.
    const asAdmin = (query: string, method = 'GET') => fetch(`${warren.url}/v1/volumes${query}`, { method, headers: { authorization: `Bearer ${otherKey}` } });
    expect(((await (await asAdmin('?tenant=default')).json()) as { volumes: { name: string }[] }).volumes.map((v) => v.name)).toEqual(['mine']);
    expect((await asAdmin('/mine?tenant=default')).status).toBe(200);
    expect((await asAdmin('?tenant=Default')).status).toBe(400);
    const member = (await (
      await fetch(`${warren.url}/v1/keys`, {
        method: 'POST',
        headers: { authorization: `Bearer ${apiKey}`, 'content-type': 'application/json' },
        body: JSON.stringify({ tenant: 'other-9', role: 'member' }),
      })
    ).json()) as { key: string };
    for (const query of ['?tenant=default', '/mine?tenant=default']) {
      const res = await fetch(`${warren.url}/v1/volumes${query}`, { headers: { authorization: `Bearer ${member.key}` } });
      expect({ query, status: res.status }).toEqual({ query, status: 403 });
    }
    // A sandbox token or a derived token may not create, list or mount volumes.
    const sandbox = await Sandbox.create(options());
    const { token } = await sandbox.deriveToken({ allowRead: ['/workspace'], readonly: true });
    for (const credential of [sandbox.token, token]) {
      const res = await fetch(`${warren.url}/v1/volumes`, { headers: { authorization: `Bearer ${credential}` } });
      expect(res.status).toBe(401);
    }
    await sandbox.kill();
    expect(warren.controller.sandboxes.list()).toEqual([]);
    await volumes.delete('mine');
  }, 120_000);
});
