import { randomBytes } from 'node:crypto';
import { mkdtemp, rm } from 'node:fs/promises';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { startAgentServer } from '@warren/agent';
import { AddressFloor, EgressGateway, SandboxEgress, type FloorClass } from '@warren/controller';
import { summarize, timeIt, type Summary } from './stats.js';

/**
 * A floor that lets the bench's own loopback upstream through, and nothing else: the bench measures
 * the relay and gateway path, not the floor (whose checks are the same for every address).
 */
class BenchFloor extends AddressFloor {
  override classify(ip: string): FloorClass | undefined {
    return ip === '127.0.0.1' ? undefined : super.classify(ip);
  }
}

/** Bytes of the large download in {@link egressThroughput}. */
export const EGRESS_DOWNLOAD_BYTES = 10 * 1024 * 1024;

/** A GET that reads the whole body and resolves with its length. */
function get(port: number, target: string, host: string): Promise<number> {
  return new Promise((resolve, reject) => {
    const req = http.request({ host: '127.0.0.1', port, path: target, headers: { host }, agent: false });
    req.on('response', (res) => {
      let bytes = 0;
      res.on('data', (chunk: Buffer) => (bytes += chunk.length));
      res.on('end', () => resolve(bytes));
      res.on('error', reject);
    });
    req.on('error', reject);
    req.end();
  });
}

/** A GET whose body must be `expected` bytes long (a short read would flatter the numbers). */
async function getAll(port: number, target: string, host: string, expected: number): Promise<void> {
  const bytes = await get(port, target, host);
  if (bytes !== expected) throw new Error(`GET ${target} read ${bytes} bytes, expected ${expected}`);
}

/**
 * The bench's egress setup, all in this process and on loopback (no Docker, no packet beyond
 * this host): an upstream the bench starts (`/` answers `ok`, `/big` {@link EGRESS_DOWNLOAD_BYTES}
 * random bytes), an in-process daemon with its relay, its tunnel and the gateway with a fixed
 * resolver answer. `measure` gets the relay's port, the upstream's port and the Host to send.
 */
async function withBenchEgress<T>(measure: (relay: number, upstreamPort: number, host: string) => Promise<T>): Promise<T> {
  const big = randomBytes(EGRESS_DOWNLOAD_BYTES);
  const upstream = http.createServer((req, res) => (req.url === '/big' ? res.end(big) : res.end('ok')));
  await new Promise<void>((resolve) => upstream.listen(0, '127.0.0.1', resolve));
  const upstreamPort = (upstream.address() as AddressInfo).port;
  const dir = await mkdtemp(path.join(os.tmpdir(), 'warren-bench-egress-'));
  const gateway = new EgressGateway({
    operator: { deny: [], labCidrs: [], resolvers: [], maxConnectionsPerSandbox: 64, secrets: {} },
    resolver: { resolve: async () => ['127.0.0.1'] },
    floor: new BenchFloor(),
  });
  const egress = await SandboxEgress.create({ gateway, maxConnections: 64, relayPort: 0 });
  const secret = randomBytes(32).toString('hex');
  const agent = await startAgentServer({
    socketPath: path.join(dir, 'agent.sock'),
    secret,
    policy: { root: dir, readOnly: false },
    home: dir,
    egress: { trustDir: path.join(dir, 'trust') },
  });
  try {
    await egress.register('bench', { mode: 'allow', rules: [{ host: 'upstream.bench', ports: [upstreamPort] }] }, []);
    await egress.connect('bench', { socketPath: agent.socketPath }, secret);
    return await measure(egress.relayPort('bench')!, upstreamPort, `upstream.bench:${upstreamPort}`);
  } finally {
    await egress.close();
    await agent.close();
    await new Promise<void>((resolve) => upstream.close(() => resolve()));
    await rm(dir, { recursive: true, force: true });
  }
}

/**
 * The latency the egress path adds to a small plain-HTTP GET: through an in-process daemon's relay,
 * its tunnel and the gateway (with its own resolver answer and a fresh upstream connection) against
 * the same GET straight to the upstream on loopback. No Docker: the daemon runs in this process.
 */
export async function egressLatency(count: number): Promise<{ viaGateway: Summary; direct: Summary }> {
  return withBenchEgress(async (relay, upstreamPort, host) => {
    const viaGateway = summarize(await timeIt(count, () => getAll(relay, `http://${host}/`, host, 2)));
    const direct = summarize(await timeIt(count, () => getAll(upstreamPort, '/', host, 2)));
    return { viaGateway, direct };
  });
}

/**
 * The gateway's throughput for a large download: a {@link EGRESS_DOWNLOAD_BYTES} GET through the
 * relay, its tunnel (with its flow-control window) and the gateway, against the same GET straight
 * to the upstream on loopback. Each sample is one whole download.
 */
export async function egressThroughput(count: number): Promise<{ viaGateway: Summary; direct: Summary; bytes: number }> {
  return withBenchEgress(async (relay, upstreamPort, host) => {
    const bytes = EGRESS_DOWNLOAD_BYTES;
    const viaGateway = summarize(await timeIt(count, () => getAll(relay, `http://${host}/big`, host, bytes), 1));
    const direct = summarize(await timeIt(count, () => getAll(upstreamPort, '/big', host, bytes), 1));
    return { viaGateway, direct, bytes };
  });
}
