import { readFileSync } from 'node:fs';
import { readFile } from 'node:fs/promises';
import { describe, expect, it } from '@jest/globals';
import { Sandbox } from '@warren/sdk';
import { ControllerProcess, type ControllerUser } from '../support/reliability.js';

/** The id of a group in /etc/group, or undefined. */
function groupId(name: string): number | undefined {
  const line = readFileSync('/etc/group', 'utf8')
    .split('\n')
    .find((l) => l.startsWith(`${name}:`));
  return line === undefined ? undefined : Number(line.split(':')[2]);
}

/** A sandbox's whole round: create, run as the sandbox user, write and read a file, kill. */
async function roundTrip(options: { baseUrl: string; apiKey: string }): Promise<void> {
  const sandbox = await Sandbox.create(options);
  try {
    expect((await sandbox.commands.run('id -u')).stdout).toBe('1000\n');
    await sandbox.files.write('/workspace/hello.txt', 'from a non-root controller');
    expect(await sandbox.files.read('/workspace/hello.txt')).toBe('from a non-root controller');
    expect((await sandbox.commands.run('cat /workspace/hello.txt')).stdout).toBe('from a non-root controller');
  } finally {
    await sandbox.kill();
  }
}

async function readyz(url: string): Promise<{ isolation: { diskQuota: { quota: boolean; reason?: string }; rootless: boolean; limitsEnforced: boolean } }> {
  return (await (await fetch(`${url}/readyz`)).json()) as never;
}

/** The real uid of a process, from /proc. */
async function uidOf(pid: number): Promise<number> {
  return Number(/^Uid:\s+(\d+)/m.exec(await readFile(`/proc/${pid}/status`, 'utf8'))?.[1]);
}

const dockerGid = groupId('docker');
const asRoot = process.getuid?.() === 0;

describe('a controller that is not root', () => {
  // A CI runner's user: uid 1001, no account, in the docker group (what `usermod -aG docker` gives).
  (asRoot && dockerGid !== undefined && !process.env.DOCKER_HOST ? it : it.skip)(
    'as uid 1001 in the docker group on the root engine: creates, runs and moves files; the workspace quota falls back to volumes, saying why',
    async () => {
      const user: ControllerUser = { uid: 1001, gid: 1001, groups: [dockerGid!] };
      const warren = await ControllerProcess.start({}, undefined, { user });
      try {
        expect(await uidOf(warren.pid)).toBe(1001);
        const { isolation } = await readyz(warren.url);
        expect(isolation.diskQuota.quota).toBe(false);
        expect(isolation.diskQuota.reason).toMatch(/root/);
        await roundTrip(warren.options);
      } finally {
        await warren.dispose();
      }
    },
  );

  // Rootless Docker of a user (scripts/lib/common.sh ensure_rootless_docker), given by WARREN_TEST_ROOTLESS_DOCKER_HOST and
  // WARREN_TEST_ROOTLESS_UID; on cgroup v1 its cgroup driver is none, so no limit holds.
  const rootlessHost = process.env.WARREN_TEST_ROOTLESS_DOCKER_HOST;
  const rootlessUid = Number(process.env.WARREN_TEST_ROOTLESS_UID);
  (asRoot && rootlessHost && Number.isInteger(rootlessUid) ? it : it.skip)(
    'as the owner of rootless Docker: refuses to start where limits are not enforced, and with the operator opt-in creates, runs and moves files',
    async () => {
      const user: ControllerUser = { uid: rootlessUid, gid: rootlessUid, groups: [] };
      const env = { DOCKER_HOST: rootlessHost! };
      await expect(ControllerProcess.start(env, undefined, { user })).rejects.toThrow(/without enforcing them.*engine\.allowUnenforcedLimits/s);
      const warren = await ControllerProcess.start({ ...env, WARREN_ALLOW_UNENFORCED_LIMITS: '1' }, undefined, { user });
      try {
        expect(await uidOf(warren.pid)).toBe(rootlessUid);
        const { isolation } = await readyz(warren.url);
        expect(isolation).toMatchObject({ rootless: true, limitsEnforced: false });
        await roundTrip(warren.options);
      } finally {
        await warren.dispose();
      }
    },
  );
});
