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

function get(port: number, target: string, host: string): Promise<void> {
  return new Promise((resolve, reject) => {
    const req = http.request({ host: '127.0.0.1', port, path: target, headers: { host }, agent: false });
    req.on('response', (res) => {
      res.resume();
      res.on('end', () => resolve());
    });
    req.on('error', reject);
    req.end();
  });
}

/**
 * The latency the egress path adds to a small plain-HTTP GET: through an in-process daemon's relay,
 * its tunnel and the gateway (with its own resolver answer and a fresh upstream connection) against
 * the same GET straight to the upstream on loopback. No Docker: the daemon runs in this process.
 */
export async function egressLatency(count: number): Promise<{ viaGateway: Summary; direct: Summary }> {
  const upstream = http.createServer((_req, res) => res.end('ok'));
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
    const relay = egress.relayPort('bench')!;
    const host = `upstream.bench:${upstreamPort}`;
    const viaGateway = summarize(await timeIt(count, () => get(relay, `http://${host}/`, host)));
    const direct = summarize(await timeIt(count, () => get(upstreamPort, '/', host)));
    return { viaGateway, direct };
  } finally {
    await egress.close();
    await agent.close();
    await new Promise<void>((resolve) => upstream.close(() => resolve()));
    await rm(dir, { recursive: true, force: true });
  }
}
