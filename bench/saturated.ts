import { Sandbox } from '@warren/sdk';
import type { ControllerProcess } from './controller-process.js';
import { summarize, timeIt, type Summary } from './stats.js';

/** A row of calls made while sandbox code spins on every CPU the sandbox has, against the same calls in the idle sandbox. */
export interface SaturatedRow {
  name: string;
  unit: 'ms';
  warren: Summary;
  raw: Summary;
  rawName: string;
  target: string;
  met: boolean;
  note?: string;
}

/** Busy loops, more than the machine's cores, so the sandbox's CPU limit is always spent. */
const SPINNERS = 4;

/**
 * The daemon's own CPU share (docs/security.md, "The daemon's CPU"): for `cpus: 0.01` and the
 * default, the create time, then `files.stat` and `commands.run('true')` in the idle sandbox and
 * again with {@link SPINNERS} busy loops running in it. The target is the issue's: each within 3
 * times the idle call. A command is sandbox code, so `true` itself runs on the sandbox's limit.
 */
export async function saturatedRows(controller: ControllerProcess, image: string, count: number): Promise<SaturatedRow[]> {
  const rows: SaturatedRow[] = [];
  for (const cpus of [0.01, undefined]) {
    const label = cpus === undefined ? 'default cpus' : `cpus ${cpus}`;
    const started = performance.now();
    const sandbox = await Sandbox.create({ baseUrl: controller.url, apiKey: controller.apiKey, image, ...(cpus === undefined ? {} : { cpus }) });
    const createMs = performance.now() - started;
    try {
      await sandbox.files.write('bench-stat.txt', 'x');
      const idleStat = summarize(await timeIt(count, () => sandbox.files.stat('bench-stat.txt')));
      const idleExec = summarize(await timeIt(Math.max(5, Math.round(count / 5)), () => sandbox.commands.run('true', { timeoutMs: 60_000 })));
      for (let i = 0; i < SPINNERS; i++) await sandbox.commands.start('while :; do :; done');
      // Let the loops spend the period's quota before timing anything.
      await new Promise((resolve) => setTimeout(resolve, 500));
      const busyStat = summarize(await timeIt(count, () => sandbox.files.stat('bench-stat.txt')));
      // At a hundredth of a CPU the kernel may hand each period's 1 ms to the loops' run queue on
      // the other core for a long while: a command that waits past its time counts, and is not timed.
      let timedOut = 0;
      const busyExec = summarize(
        await timeIt(Math.max(5, Math.round(count / 5)), () =>
          sandbox.commands.run('true', { timeoutMs: 20_000 }).catch((err: { code?: string }) => {
            if (err.code !== 'REQUEST_TIMEOUT') throw err;
            timedOut++;
          }),
        ),
      );
      const note = `create ${createMs.toFixed(0)} ms${timedOut > 0 ? `; ${timedOut} exec calls waited past 20 s (their 20 s are in the figures)` : ''}`;
      const row = (name: string, busy: Summary, idle: Summary): SaturatedRow => ({
        name: `${name}, sandbox CPU saturated (${label})`,
        unit: 'ms',
        warren: busy,
        raw: idle,
        rawName: 'the same call, sandbox idle',
        target: 'ratio <= 3',
        met: busy.p50 <= 3 * idle.p50,
        note,
      });
      rows.push(row('files.stat', busyStat, idleStat), row('exec `true`', busyExec, idleExec));
    } finally {
      await sandbox.kill().catch(() => undefined);
    }
  }
  return rows;
}
