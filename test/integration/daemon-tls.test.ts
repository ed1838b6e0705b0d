import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import { randomBytes } from 'node:crypto';
import { mkdtemp, rm } from 'node:fs/promises';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import tls from 'node:tls';
import { daemonTlsClientOptions } from '@warren/protocol/node';
import { probeAgent } from '@warren/controller';
import { startAgentServer, type AgentServer } from '@warren/agent';

// The daemon's TCP listener (Kubernetes' pod-ip and port-forward channels): TLS keyed by the
// sandbox's secret, so a peer on the pod network that lacks the secret gets no byte of HTTP.
describe('the daemon over TCP with TLS keyed by its secret', () => {
  const secret = randomBytes(24).toString('hex');
  let dir: string;
  let agent: AgentServer;

  beforeAll(async () => {
    dir = await mkdtemp(path.join(os.tmpdir(), 'warren-daemon-tls-'));
    agent = await startAgentServer({ socketPath: path.join(dir, 'agent.sock'), secret, tcpPort: 0, policy: { root: dir, readOnly: false }, home: dir });
  });
  afterAll(async () => {
    await agent?.close();
    await rm(dir, { recursive: true, force: true });
  });

  const overTls = (key: string) => ({
    openStream: () =>
      new Promise<tls.TLSSocket>((resolve, reject) => {
        const socket = tls.connect({ ...daemonTlsClientOptions(key), host: '127.0.0.1', port: agent.tcpPort! });
        socket.once('secureConnect', () => resolve(socket));
        socket.once('error', reject);
      }),
  });

  it('answers a real call from a peer holding the secret', async () => {
    expect(agent.tcpPort).toBeGreaterThan(0);
    const info = await probeAgent(overTls(secret), secret, 5000);
    expect(info.pid).toBe(process.pid);
  });

  it('refuses the handshake of a peer with another secret', async () => {
    await expect(overTls(randomBytes(24).toString('hex')).openStream()).rejects.toThrow();
  });

  it('refuses a certificate-only TLS client and plain HTTP, answering no HTTP at all', async () => {
    const certOnly = new Promise<string>((resolve) => {
      const socket = tls.connect({ host: '127.0.0.1', port: agent.tcpPort!, rejectUnauthorized: false });
      socket.once('secureConnect', () => resolve('connected'));
      socket.once('error', (err: NodeJS.ErrnoException) => resolve(err.code ?? err.message));
    });
    expect(await certOnly).toMatch(/HANDSHAKE_FAILURE|ECONNRESET/);

    const answer = await new Promise<string>((resolve) => {
      const socket = net.connect(agent.tcpPort!, '127.0.0.1', () =>
        socket.write(`GET / HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nAuthorization: Bearer ${secret}\r\n\r\n`),
      );
      let text = '';
      socket.on('data', (d: Buffer) => (text += d.toString('latin1')));
      socket.on('close', () => resolve(text));
      socket.on('error', () => undefined);
    });
    expect(answer).not.toMatch(/HTTP\/1\.1/);
  });

  it('refuses a peer that holds the TLS key but not the bearer secret (two checks, not one)', async () => {
    // The same key on the TLS layer, a wrong bearer token inside: the upgrade is refused.
    await expect(probeAgent(overTls(secret), 'x'.repeat(48), 5000)).rejects.toMatchObject({ code: 'UPSTREAM_UNAVAILABLE' });
  });
});
