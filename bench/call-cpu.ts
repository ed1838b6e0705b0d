import { execFile } from 'node:child_process';
import { readFile, readdir } from 'node:fs/promises';
import { promisify } from 'node:util';
import { Sandbox } from '@warren/sdk';
import { SMALL_DISK_MB, startControllerProcess } from './controller-process.js';
import { fmt, machine, percentiles, progress, report, table, writeOut } from './modes-common.js';

/** CPU time a process has had, in nanoseconds: the sum over its threads of `/proc/<pid>/task/<tid>/schedstat`'s first field. */
export async function processCpuNs(pid: number): Promise<number> {
  let total = 0;
  for (const tid of await readdir(`/proc/${pid}/task`).catch(() => [] as string[])) {
    const text = await readFile(`/proc/${pid}/task/${tid}/schedstat`, 'utf8').catch(() => '');
    total += Number(text.split(' ')[0] ?? 0) || 0;
  }
  return total;
}

/** The daemon's pid on the host: the child of the container's first process (the engine's init). */
async function daemonPid(sandboxId: string): Promise<number> {
  const { stdout } = await promisify(execFile)('docker', ['inspect', '--format', '{{.State.Pid}}', `warren-${sandboxId}`]);
  const init = Number(stdout.trim());
  const children = (await readFile(`/proc/${init}/task/${init}/children`, 'utf8').catch(() => '')).trim().split(/\s+/).filter(Boolean);
  for (const child of children) {
    const cmdline = await readFile(`/proc/${child}/cmdline`, 'utf8').catch(() => '');
    if (cmdline.includes('warren-agent')) return Number(child);
  }
  return init; // no init process in between (an engine without --init): the first process is the daemon
}

interface PhaseResult {
  phase: string;
  calls: number;
  /** Microseconds of CPU per call, per process (the SDK's is this process, which does nothing else meanwhile). */
  sdkUs: number;
  controllerUs: number;
  daemonUs: number;
  wall: { p50: number; p99: number };
  callsPerSecond: number;
}

/**
 * `scripts/bench --call-cpu`: the CPU each process spends on one small call, which unlike wall
 * time holds on a machine other jobs load. For `files.stat` one after another, `commands.run('true')`
 * one after another, and `files.stat` calls all at once over several sandboxes: CPU per call of the
 * SDK (this process), the controller and the daemons (from `/proc/<pid>/task/* /schedstat`), with
 * the wall p50/p99 and the call rate beside them. Each phase runs `rounds` times; the table shows
 * the median round. Before them, the first calls of the new sandboxes, once: `N` at once, spread over them.
 */
export async function callCpuMode(options: { count: number; sandboxes: number; rounds: number; image: string; jsonFile: string }): Promise<void> {
  const controller = await startControllerProcess({ WARREN_POOL_SIZE: '0' });
  const sandboxes: Sandbox[] = [];
  try {
    for (let i = 0; i < options.sandboxes; i += 5) {
      const batch = await Promise.all(
        Array.from({ length: Math.min(5, options.sandboxes - i) }, () =>
          Sandbox.create({ baseUrl: controller.url, apiKey: controller.apiKey, image: options.image, diskMb: SMALL_DISK_MB }),
        ),
      );
      sandboxes.push(...batch);
    }
    const pids = await Promise.all(sandboxes.map((s) => daemonPid(s.id)));
    const first = sandboxes[0]!;

    const measure = async (phase: string, calls: number, daemons: number[], run: () => Promise<number[]>): Promise<PhaseResult> => {
      const cpuBefore = process.cpuUsage();
      const controllerBefore = await processCpuNs(controller.pid);
      const daemonBefore = await Promise.all(daemons.map(processCpuNs));
      const started = performance.now();
      const latencies = await run();
      const seconds = (performance.now() - started) / 1000;
      const controllerAfter = await processCpuNs(controller.pid);
      const daemonAfter = await Promise.all(daemons.map(processCpuNs));
      const cpu = process.cpuUsage(cpuBefore);
      const daemonNs = daemonAfter.reduce((sum, after, i) => sum + after - daemonBefore[i]!, 0);
      const p = percentiles(latencies);
      return {
        phase,
        calls,
        sdkUs: (cpu.user + cpu.system) / calls,
        controllerUs: (controllerAfter - controllerBefore) / 1000 / calls,
        daemonUs: daemonNs / 1000 / calls,
        wall: { p50: p.p50, p99: p.p99 },
        callsPerSecond: calls / seconds,
      };
    };
    const sequential = async (calls: number, fn: () => Promise<unknown>) => {
      const out: number[] = [];
      for (let i = 0; i < calls; i++) {
        const t = performance.now();
        await fn();
        out.push(performance.now() - t);
      }
      return out;
    };
    const concurrent = async (calls: number) => {
      const out: number[] = [];
      await Promise.all(
        Array.from({ length: calls }, async (_, i) => {
          const t = performance.now();
          await sandboxes[i % sandboxes.length]!.files.stat('.');
          out.push(performance.now() - t);
        }),
      );
      return out;
    };

    progress('call CPU: the first calls of new sandboxes');
    const firstBurst = await measure(
      `files.stat, ${options.count} at once over ${sandboxes.length} new sandboxes (their first calls)`,
      options.count,
      pids,
      () => concurrent(options.count),
    );
    await first.files.write('x', 'x');
    progress('call CPU: warming up');
    await sequential(300, () => first.files.stat('x'));
    await sequential(50, () => first.commands.run('true'));
    await concurrent(options.count);

    const results: PhaseResult[][] = [[], [], []];
    for (let round = 0; round < options.rounds; round++) {
      progress(`call CPU: round ${round + 1} of ${options.rounds}`);
      results[0]!.push(await measure('files.stat, one after another', options.count, [pids[0]!], () => sequential(options.count, () => first.files.stat('x'))));
      const execCount = Math.max(50, Math.round(options.count / 5));
      results[1]!.push(
        await measure('commands.run(`true`), one after another', execCount, [pids[0]!], () => sequential(execCount, () => first.commands.run('true'))),
      );
      results[2]!.push(
        await measure(`files.stat, ${options.count} at once over ${sandboxes.length} sandboxes`, options.count, pids, () => concurrent(options.count)),
      );
    }
    // The round with the median total CPU per call stands for its phase.
    const median = results.map((rounds) => {
      const sorted = [...rounds].sort((a, b) => a.sdkUs + a.controllerUs + a.daemonUs - (b.sdkUs + b.controllerUs + b.daemonUs));
      return sorted[Math.floor(sorted.length / 2)]!;
    });
    median.unshift(firstBurst);
    const load = (await readFile('/proc/loadavg', 'utf8')).split(' ').slice(0, 3).join(' ');
    report(
      [
        `\nCPU per small call, per process (µs; median of ${options.rounds} rounds), and wall time. Machine: ${machine()}; load average ${load}.\n`,
        table(
          ['calls', 'n', 'SDK (µs)', 'controller (µs)', 'daemon (µs)', 'wall p50 (ms)', 'wall p99 (ms)', 'calls/s'],
          median.map((r) => [
            r.phase,
            String(r.calls),
            fmt(r.sdkUs, 1),
            fmt(r.controllerUs, 1),
            fmt(r.daemonUs, 1),
            fmt(r.wall.p50, 3),
            fmt(r.wall.p99, 3),
            fmt(r.callsPerSecond, 0),
          ]),
        ),
        '',
      ].join('\n'),
    );
    await writeOut(
      options.jsonFile,
      `${JSON.stringify({ date: new Date().toISOString(), machine: machine(), load, firstBurst, rounds: results, median }, null, 2)}\n`,
    );
  } finally {
    await Promise.all(sandboxes.map((s) => s.kill().catch(() => undefined)));
    await controller.stop();
  }
}
