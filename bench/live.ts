import Docker from 'dockerode';
import type { Sandbox } from '@warren/sdk';
import { summarize, timeIt, type Summary } from './stats.js';

/** A measurement of the live features, with its nearest baseline measured in the same run. */
export interface LiveRow {
  name: string;
  unit: 'ms';
  warren: Summary;
  raw: Summary;
  rawName: string;
  note?: string;
}

const SERVER = 'python3 -m http.server 8000 --bind 0.0.0.0';
/** The file served for the throughput row, made in both the sandbox and the raw container. */
const BIG_BYTES = 16 * 1024 * 1024;
const MAKE_BIG = `head -c ${BIG_BYTES} /dev/urandom > big.bin`;

/**
 * The live features against their nearest baselines: a watch event after a write (against the
 * write call alone), and an HTTP GET through a port URL (against the same server in a container
 * on a Docker bridge network, reached at the container's address: what raw Docker networking
 * gives). The bridge network and container are the bench's own and are removed afterwards.
 */
export async function liveRows(sandbox: Sandbox, image: string, count: number): Promise<LiveRow[]> {
  const rows: LiveRow[] = [];

  // Watch: from the start of a write call to the event arriving at the client, with no coalescing window.
  await sandbox.files.mkdir('bench-watch');
  const watcher = await sandbox.files.watch('bench-watch', { recursive: false, coalesceMs: 0 });
  const iterator = watcher[Symbol.asyncIterator]();
  const writeOnly = summarize(await timeIt(count, (i) => sandbox.files.write(`bench-watch-plain-${i}`, 'x')));
  const eventLatency: number[] = [];
  for (let i = 0; i < count; i++) {
    const name = `bench-watch/f${i}`;
    const started = performance.now();
    await sandbox.files.write(name, 'x');
    for (;;) {
      const next = await iterator.next();
      if (next.done) throw new Error('the watch ended during the benchmark');
      if ('path' in next.value && next.value.path === name) break;
    }
    eventLatency.push(performance.now() - started);
  }
  watcher.close();
  rows.push({
    name: 'watch: write to the client’s event (coalesceMs 0)',
    unit: 'ms',
    warren: summarize(eventLatency),
    raw: writeOnly,
    rawName: 'the files.write call alone',
  });

  // Ports: a small GET through the controller's port proxy and the daemon's tunnel.
  await sandbox.commands.run(MAKE_BIG);
  await sandbox.commands.start(SERVER);
  const url = sandbox.ports.baseUrl(8000);
  const headers = { authorization: `Bearer ${sandbox.token}` };
  const getThrough = async (target: string, init?: RequestInit) => {
    const res = await fetch(target, init);
    await res.arrayBuffer();
    if (res.status !== 200) throw new Error(`GET ${target} answered ${res.status}`);
  };
  for (let i = 0; i < 50; i++) {
    if (
      await getThrough(url, { headers }).then(
        () => true,
        () => false,
      )
    )
      break;
    await new Promise((r) => setTimeout(r, 100));
  }
  const viaWarren = summarize(await timeIt(count, () => getThrough(url, { headers })));
  const bigCount = Math.max(3, Math.round(count / 20));
  const bigViaWarren = summarize(await timeIt(bigCount, () => getThrough(`${url}big.bin`, { headers })));

  const docker = new Docker();
  const network = await docker.createNetwork({ Name: `warren-bench-live-${process.pid}`, Labels: { 'warren.bench': 'raw' } });
  const container = await docker.createContainer({
    Image: image,
    Entrypoint: ['sh', '-c', `${MAKE_BIG} && exec ${SERVER}`],
    User: '1000:1000',
    WorkingDir: '/tmp',
    Labels: { 'warren.bench': 'raw' },
    HostConfig: { NetworkMode: network.id, CapDrop: ['ALL'], SecurityOpt: ['no-new-privileges=true'] },
  });
  try {
    await container.start();
    const info = await container.inspect();
    const address = Object.values(info.NetworkSettings.Networks)[0]?.IPAddress;
    if (!address) throw new Error('the raw container got no address on its bridge network');
    const rawUrl = `http://${address}:8000/`;
    for (let i = 0; i < 50; i++) {
      if (
        await getThrough(rawUrl).then(
          () => true,
          () => false,
        )
      )
        break;
      await new Promise((r) => setTimeout(r, 100));
    }
    const viaBridge = summarize(await timeIt(count, () => getThrough(rawUrl)));
    const bigViaBridge = summarize(await timeIt(bigCount, () => getThrough(`${rawUrl}big.bin`)));
    const rawName = 'the same server on a Docker bridge, at the container’s address';
    rows.push({
      name: 'port: small HTTP GET through the port URL',
      unit: 'ms',
      warren: viaWarren,
      raw: viaBridge,
      rawName,
      note: 'each request is a tunnel of its own over the daemon channel, on a kept daemon connection',
    });
    rows.push({
      name: `port: ${BIG_BYTES / 1024 / 1024} MiB HTTP GET through the port URL`,
      unit: 'ms',
      warren: bigViaWarren,
      raw: bigViaBridge,
      rawName,
      note: `throughput at p50: ${mibPerSecond(BIG_BYTES, bigViaWarren.p50)} MiB/s through Warren, ${mibPerSecond(BIG_BYTES, bigViaBridge.p50)} MiB/s on the bridge`,
    });
  } finally {
    await container.remove({ force: true }).catch(() => undefined);
    await network.remove().catch(() => undefined);
  }
  return rows;
}

function mibPerSecond(bytes: number, ms: number): string {
  return (bytes / 1024 / 1024 / (ms / 1000)).toFixed(0);
}
