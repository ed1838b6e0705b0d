import { randomBytes } from 'node:crypto';
import { mkdtemp, readdir, readFile, rm, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import Docker from 'dockerode';
import { Sandbox } from '@warren/sdk';
import { MiB, startControllerProcess } from './controller-process.js';
import { fmt, machine, percentiles, progress, report, table, writeOut } from './modes-common.js';
import { RawDocker } from './raw-docker.js';

/** CPU time of every thread of a process so far, in milliseconds (`/proc/<pid>/task/*\/schedstat`). */
export async function processCpuMs(pid: number): Promise<number> {
  let ns = 0;
  for (const task of await readdir(`/proc/${pid}/task`).catch(() => [] as string[])) {
    const text = await readFile(`/proc/${pid}/task/${task}/schedstat`, 'utf8').catch(() => '0');
    ns += Number(text.split(' ')[0]);
  }
  return ns / 1e6;
}

/** The host pid of a sandbox's daemon: the process of its container whose command runs the agent bundle. */
async function daemonPid(docker: Docker, sandboxId: string): Promise<number> {
  const [container] = await docker.listContainers({ filters: { label: [`warren.sandbox=${sandboxId}`] } });
  if (!container) throw new Error(`no container for sandbox ${sandboxId}`);
  for (const pid of await readdir('/proc')) {
    if (!/^\d+$/.test(pid)) continue;
    const cgroup = await readFile(`/proc/${pid}/cgroup`, 'utf8').catch(() => '');
    if (!cgroup.includes(container.Id)) continue;
    const [command, ...args] = (await readFile(`/proc/${pid}/cmdline`, 'utf8').catch(() => '')).split('\0');
    // The container's init (docker-init) names the agent in its arguments too: the daemon is the process that runs it.
    if (!command?.includes('docker-init') && args.some((arg) => arg.endsWith('warren-agent.mjs'))) return Number(pid);
  }
  throw new Error(`no daemon process found in container ${container.Id}`);
}

interface Measured {
  wall: number[];
  /** CPU milliseconds per operation, by process. */
  cpu: { sdk: number; controller: number; daemon: number };
}

/**
 * `scripts/bench --transfers`: the four 100 MiB rows of the default table (write, read in 16 MiB
 * ranges, streamed upload and download), each with the CPU time every Warren process spent per
 * operation (the SDK in this process, the controller, the sandbox's daemon), from
 * `/proc/<pid>/task/*\/schedstat`. CPU time holds still when other jobs share the machine; wall
 * time does not. The raw-Docker baselines are the default table's.
 */
export async function transfersMode(options: { count: number; image: string; jsonFile: string }): Promise<void> {
  const { count } = options;
  const controller = await startControllerProcess({ WARREN_POOL_SIZE: '0' });
  const docker = new Docker();
  const raw = new RawDocker(docker);
  const rawContainer = await raw.createAndStart(options.image);
  const sandbox = await Sandbox.create({ baseUrl: controller.url, apiKey: controller.apiKey, image: options.image });
  const dir = await mkdtemp(path.join(os.tmpdir(), 'warren-bench-'));
  try {
    const daemon = await daemonPid(docker, sandbox.id);
    const content = randomBytes(100 * MiB);
    const local = path.join(dir, 'up.bin');
    const down = path.join(dir, 'down.bin');
    await writeFile(local, content);
    const measure = async (fn: () => Promise<unknown>): Promise<Measured> => {
      await fn();
      const wall: number[] = [];
      const sdk0 = process.cpuUsage();
      const c0 = await processCpuMs(controller.pid);
      const d0 = await processCpuMs(daemon);
      for (let i = 0; i < count; i++) {
        const started = performance.now();
        await fn();
        wall.push(performance.now() - started);
      }
      const sdk = process.cpuUsage(sdk0);
      const c1 = await processCpuMs(controller.pid);
      const d1 = await processCpuMs(daemon);
      return { wall, cpu: { sdk: (sdk.user + sdk.system) / 1000 / count, controller: (c1 - c0) / count, daemon: (d1 - d0) / count } };
    };
    const rawWall = async (fn: () => Promise<unknown>) => (await measure(fn)).wall;
    progress('transfers: write 100 MiB');
    const write = await measure(() => sandbox.files.write('bench-100m.bin', content));
    const writeRaw = await rawWall(() => raw.putFile(rawContainer, '/tmp', 'bench-100m.bin', content));
    // The floor of an atomic write on the sandbox's own disk: the same size written by dd inside the
    // sandbox to a new file, then renamed over the old one (ext4 starts writing a file renamed over
    // another back to disk at once), timed by the daemon around the command.
    const writeFloor: number[] = [];
    for (let i = 0; i <= count; i++) {
      const { durationMs } = await sandbox.commands.run('dd if=/dev/zero of=.floor.tmp bs=1M count=100 status=none && mv -f .floor.tmp floor.bin');
      if (i > 0) writeFloor.push(durationMs);
    }
    progress('transfers: read 100 MiB in 16 MiB ranges');
    const read = await measure(async () => {
      for (let offset = 0; offset < content.length; offset += 16 * MiB) await sandbox.files.readBytes('bench-100m.bin', { offset, length: 16 * MiB });
    });
    const readRaw = await rawWall(() => raw.getFile(rawContainer, '/tmp/bench-100m.bin'));
    progress('transfers: uploadFrom / downloadFile 100 MiB');
    const up = await measure(() => sandbox.files.uploadFrom(local, 'bench-up.bin', { overwrite: true }));
    const upRaw = await rawWall(() => raw.copyIn(rawContainer, '/tmp', local, 'bench-up.bin'));
    const downloaded = await measure(() => sandbox.files.downloadFile('bench-up.bin', down, { overwrite: true }));
    const downRaw = await rawWall(async () => {
      await rm(down, { force: true });
      await raw.copyOut(rawContainer, '/tmp/bench-up.bin', down);
    });
    const rows = [
      { what: 'write 100 MiB', warren: write, raw: writeRaw, rawName: 'putArchive', floor: writeFloor },
      { what: 'read 100 MiB (16 MiB ranges)', warren: read, raw: readRaw, rawName: 'getArchive' },
      { what: 'upload 100 MiB file (uploadFrom)', warren: up, raw: upRaw, rawName: 'docker cp in' },
      { what: 'download 100 MiB file (downloadFile)', warren: downloaded, raw: downRaw, rawName: 'docker cp out' },
    ];
    const cells = rows.map(
      ({ what, warren, raw: baseline, rawName, floor }: { what: string; warren: Measured; raw: number[]; rawName: string; floor?: number[] }) => {
        const w = percentiles(warren.wall);
        const r = percentiles(baseline);
        return [
          what,
          fmt(w.p50),
          `${fmt(r.p50)} (${rawName})`,
          floor ? fmt(percentiles(floor).p50) : '-',
          (w.p50 / r.p50).toFixed(2),
          fmt(warren.cpu.sdk),
          fmt(warren.cpu.controller),
          fmt(warren.cpu.daemon),
          fmt(warren.cpu.sdk + warren.cpu.controller + warren.cpu.daemon),
        ];
      },
    );
    const load = os.loadavg()[0]!.toFixed(1);
    report(
      [
        `\n100 MiB transfers, ${count} each after one unmeasured; wall p50 and CPU ms per operation by process (load average ${load}). Machine: ${machine()}\n`,
        table(
          [
            'what',
            'wall p50 (ms)',
            'baseline p50 (ms)',
            'floor p50 (ms): dd + mv in the sandbox',
            'ratio',
            'SDK CPU',
            'controller CPU',
            'daemon CPU',
            'Warren CPU total',
          ],
          cells,
        ),
        '',
      ].join('\n'),
    );
    await writeOut(options.jsonFile, `${JSON.stringify({ date: new Date().toISOString(), machine: machine(), load, count, rows }, null, 2)}\n`);
  } finally {
    await rm(dir, { recursive: true, force: true });
    await sandbox.kill().catch(() => undefined);
    await raw.remove(rawContainer);
    await controller.stop();
  }
}
