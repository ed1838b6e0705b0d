import { randomBytes } from 'node:crypto';
import { Sandbox, WarrenError } from '@warren/sdk';
import { MiB, processRssMiB, startControllerProcess, SMALL_DISK_MB } from './controller-process.js';
import { fmt, machine, percentiles, progress, table, writeOut } from './modes-common.js';
import { report } from './modes-common.js';
import { lineChartsSvg } from './svg-chart.js';

const OPS = ['exec', 'read', 'write', 'list'] as const;
type Op = (typeof OPS)[number];

/** One time slice of the run. */
interface Bucket {
  /** Seconds from the start of the load to the end of this slice. */
  t: number;
  calls: number;
  perSecond: number;
  p50Ms: number;
  p99Ms: number;
  typedErrors: number;
  untypedErrors: number;
  controllerRssMiB: number;
  daemonRssMiB: number;
}

/**
 * `scripts/bench --sustained[=S]`: S seconds (600 by default) of calls as fast as `workers`
 * concurrent loops can make them over `sandboxes` sandboxes: a mix, in equal parts, of
 * `commands.run('true')`, a 4 KiB `files.read`, a 4 KiB `files.write` and a `files.list('.')`.
 * Prints throughput, p50/p99 and the memory of the controller and of the daemons per time slice,
 * writes them as JSON, and draws them as an SVG chart (docs/bench-sustained.svg by default).
 */
export async function sustainedMode(options: {
  seconds: number;
  sandboxes: number;
  workers: number;
  image: string;
  jsonFile: string;
  svgFile: string;
}): Promise<void> {
  const { seconds, image } = options;
  const bucketSeconds = Math.max(1, Math.round(seconds / 60));
  const controller = await startControllerProcess({ WARREN_POOL_SIZE: '0', WARREN_MAX_SANDBOXES: String(options.sandboxes + 10) });
  const base = { baseUrl: controller.url, apiKey: controller.apiKey, image, diskMb: SMALL_DISK_MB };
  const sandboxes: Sandbox[] = [];
  const payload = randomBytes(4096);
  try {
    progress(`sustained: creating ${options.sandboxes} sandboxes`);
    for (let i = 0; i < options.sandboxes; i += 5) {
      const batch = await Promise.all(Array.from({ length: Math.min(5, options.sandboxes - i) }, () => Sandbox.create({ ...base, ttlSeconds: seconds + 600 })));
      sandboxes.push(...batch);
    }
    await Promise.all(sandboxes.map((s) => s.files.write('data.bin', payload)));

    progress(`sustained: ${seconds} s of ${options.workers} concurrent call loops over ${sandboxes.length} sandboxes (slices of ${bucketSeconds} s)`);
    const started = performance.now();
    const end = started + seconds * 1000;
    const slices: { latencies: number[]; typed: number; untyped: number }[] = [];
    const sliceOf = (at: number) => {
      const index = Math.floor((at - started) / 1000 / bucketSeconds);
      while (slices.length <= index) slices.push({ latencies: [], typed: 0, untyped: 0 });
      return slices[index]!;
    };
    const byOp = new Map<Op, number[]>(OPS.map((op) => [op, []]));
    const untypedExamples: string[] = [];
    const worker = async (w: number) => {
      for (let i = 0; performance.now() < end; i++) {
        const sandbox = sandboxes[(w + i * 7) % sandboxes.length]!;
        const op = OPS[(w + i) % OPS.length]!;
        const t = performance.now();
        try {
          if (op === 'exec') await sandbox.commands.run('true');
          else if (op === 'read') await sandbox.files.read('data.bin', { format: 'bytes' });
          else if (op === 'write') await sandbox.files.write(`w-${w}.bin`, payload);
          else await sandbox.files.list('.');
          const ms = performance.now() - t;
          sliceOf(t).latencies.push(ms);
          byOp.get(op)!.push(ms);
        } catch (err) {
          const typed = err instanceof WarrenError && err.code !== 'INTERNAL';
          sliceOf(t)[typed ? 'typed' : 'untyped']++;
          if (!typed && untypedExamples.length < 5) untypedExamples.push(String((err as Error).message ?? err));
        }
      }
    };
    // Memory once per slice: the controller's RSS from /proc, the daemons' from three fixed sandboxes.
    const memory: { controller: number; daemon: number }[] = [];
    const watched = sandboxes.slice(0, 3);
    let sampling = true;
    const sampler = (async () => {
      while (sampling) {
        const controllerRss = await processRssMiB(controller.pid);
        const daemons = await Promise.all(watched.map(async (s) => (await s.daemonInfo()).rssBytes / MiB));
        memory.push({ controller: controllerRss, daemon: daemons.reduce((a, b) => a + b, 0) / daemons.length });
        await new Promise((r) => setTimeout(r, bucketSeconds * 1000));
      }
    })();
    await Promise.all(Array.from({ length: options.workers }, (_, w) => worker(w)));
    sampling = false;
    await sampler;

    const buckets: Bucket[] = slices.map((slice, i) => {
      const p = percentiles(slice.latencies);
      const mem = memory[Math.min(memory.length - 1, i)] ?? { controller: NaN, daemon: NaN };
      return {
        t: (i + 1) * bucketSeconds,
        calls: slice.latencies.length,
        perSecond: slice.latencies.length / bucketSeconds,
        p50Ms: p.p50,
        p99Ms: p.p99,
        typedErrors: slice.typed,
        untypedErrors: slice.untyped,
        controllerRssMiB: mem.controller,
        daemonRssMiB: mem.daemon,
      };
    });
    const total = buckets.reduce((a, b) => a + b.calls, 0);
    const typed = buckets.reduce((a, b) => a + b.typedErrors, 0);
    const untyped = buckets.reduce((a, b) => a + b.untypedErrors, 0);
    const overall = percentiles(slices.flatMap((s) => s.latencies));
    const every = Math.max(1, Math.ceil(buckets.length / 20));
    const shown = buckets.filter((_, i) => i % every === 0 || i === buckets.length - 1);
    report(
      [
        `\nSustained load: ${seconds} s, ${options.workers} concurrent call loops over ${sandboxes.length} sandboxes, exec/read/write/list in equal parts. Machine: ${machine()}\n`,
        `${total} calls, ${fmt(total / seconds)} calls/s, p50 ${fmt(overall.p50)} ms, p99 ${fmt(overall.p99)} ms; ${typed} typed errors, ${untyped} untyped errors${untypedExamples.length ? ` (${untypedExamples.join('; ')})` : ''}\n`,
        table(
          ['call', 'n', 'p50 (ms)', 'p99 (ms)'],
          OPS.map((op) => {
            const p = percentiles(byOp.get(op)!);
            return [op, String(p.n), fmt(p.p50), fmt(p.p99)];
          }),
        ),
        '',
        table(
          ['t (s)', 'calls/s', 'p50 (ms)', 'p99 (ms)', 'errors (typed / untyped)', 'controller RSS (MiB)', 'daemon RSS (MiB)'],
          shown.map((b) => [
            String(b.t),
            fmt(b.perSecond),
            fmt(b.p50Ms),
            fmt(b.p99Ms),
            `${b.typedErrors} / ${b.untypedErrors}`,
            fmt(b.controllerRssMiB),
            fmt(b.daemonRssMiB),
          ]),
        ),
        '',
      ].join('\n'),
    );
    const result = {
      date: new Date().toISOString(),
      machine: machine(),
      seconds,
      sandboxes: sandboxes.length,
      workers: options.workers,
      total,
      perSecond: total / seconds,
      p50Ms: overall.p50,
      p99Ms: overall.p99,
      typedErrors: typed,
      untypedErrors: untyped,
      buckets,
    };
    await writeOut(options.jsonFile, `${JSON.stringify(result, null, 2)}\n`);
    const at = (pick: (b: Bucket) => number) => buckets.map((b) => ({ x: b.t, y: pick(b) }));
    await writeOut(
      options.svgFile,
      lineChartsSvg(`Sustained load: ${sandboxes.length} sandboxes, ${options.workers} call loops, ${seconds} s (${result.date.slice(0, 16)}Z)`, [
        { title: 'Throughput', unit: 'calls/s', series: [{ name: 'calls/s', colour: '#1f77b4', points: at((b) => b.perSecond) }] },
        {
          title: 'Latency',
          unit: 'ms',
          series: [
            { name: 'p50', colour: '#2ca02c', points: at((b) => b.p50Ms) },
            { name: 'p99', colour: '#d62728', points: at((b) => b.p99Ms) },
          ],
        },
        {
          title: 'Memory',
          unit: 'MiB',
          series: [
            { name: 'controller RSS', colour: '#9467bd', points: at((b) => b.controllerRssMiB) },
            { name: 'daemon RSS (mean of 3)', colour: '#ff7f0e', points: at((b) => b.daemonRssMiB) },
          ],
        },
      ]),
    );
  } finally {
    for (let i = 0; i < sandboxes.length; i += 10) await Promise.all(sandboxes.slice(i, i + 10).map((s) => s.kill().catch(() => undefined)));
    await controller.stop();
  }
}
