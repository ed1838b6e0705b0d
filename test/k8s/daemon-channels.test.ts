import { randomBytes } from 'node:crypto';
import net from 'node:net';
import tls from 'node:tls';
import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import { CoreV1Api } from '@kubernetes/client-node';
import { probeAgent, type KubernetesDaemonChannel, type KubernetesProvider } from '@warren/controller';
import { DAEMON_TLS_PORT, daemonTlsClientOptions } from '@warren/protocol/node';
import { openK8sFixture, type K8sFixture } from '../support/k8s-cluster.js';
import { untilDaemonAnswers } from './daemon-ready.js';

// Every way the controller reaches a daemon on the test cluster: TCP to the pod IP (node 1's pods
// are on the host's route table, node 2's through its route), port-forward through the API server,
// and the exec bridge. The TCP listener is TLS keyed by the sandbox's secret: tests below connect
// to the pod the test made, on the test cluster's own pod network.
describe('reaching the daemon on Kubernetes by each channel', () => {
  let fixture: K8sFixture;
  let core: CoreV1Api;

  beforeAll(async () => {
    fixture = await openK8sFixture();
    core = fixture.admin.makeApiClient(CoreV1Api);
  }, 180_000);
  afterAll(async () => {
    await fixture?.close();
  });

  const channels: KubernetesDaemonChannel[] = ['pod-ip', 'port-forward', 'exec'];
  it.each(channels)('answers a real call over %s on both nodes', async (channel) => {
    for (const node of ['node1', 'node2']) {
      const provider = await fixture.provider({ daemonChannel: channel, nodeSelector: { 'warren.dev/test-node': node } });
      const spec = fixture.spec();
      const handle = await provider.create(spec);
      try {
        const pod = await core.readNamespacedPod({ name: handle, namespace: fixture.namespace });
        expect(pod.spec!.nodeName).toBe(node);
        // With exec the pod opens no port at all; the TCP channels ask for the daemon's TLS port.
        const args = pod.spec!.containers[0]!.command!;
        expect(args.includes('--tcp-port')).toBe(channel !== 'exec');
        // The create returns once the container runs; the daemon listens a boot later.
        const info = await untilDaemonAnswers(provider, spec);
        expect(info.uid).toBe(0);
        // A second connection reuses nothing of the first: the channel opens per connection.
        expect((await probeAgent(provider.daemon(spec.agentId), spec.daemonSecret, 15_000)).pid).toBe(info.pid);
      } finally {
        await provider.remove(handle, spec.agentId);
      }
    }
  });

  describe('a peer on the pod network without the secret', () => {
    let provider: KubernetesProvider;
    let spec: ReturnType<K8sFixture['spec']>;
    let handle: string;
    let ip: string;

    beforeAll(async () => {
      provider = await fixture.provider({ daemonChannel: 'pod-ip' });
      spec = fixture.spec();
      handle = await provider.create(spec);
      ip = (await core.readNamespacedPod({ name: handle, namespace: fixture.namespace })).status!.podIP!;
      // The daemon is up (the real channel answers), so a refusal below is the daemon's, not a listener missing.
      await untilDaemonAnswers(provider, spec);
    }, 120_000);
    afterAll(async () => {
      await provider?.remove(handle, spec.agentId);
    });

    it('gets no HTTP from plain TCP even with the bearer secret', async () => {
      const answer = await new Promise<string>((resolve) => {
        const socket = net.connect(DAEMON_TLS_PORT, ip, () =>
          socket.write(`GET / HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nAuthorization: Bearer ${spec.daemonSecret}\r\n\r\n`),
        );
        let text = '';
        socket.setTimeout(10_000, () => socket.destroy());
        socket.on('data', (d: Buffer) => (text += d.toString('latin1')));
        socket.on('close', () => resolve(text));
        socket.on('error', () => undefined);
      });
      expect(answer).not.toMatch(/HTTP\/1\.1/);
    });

    it('fails the TLS handshake with a wrong key or with no key at all', async () => {
      const attempt = (options: tls.ConnectionOptions) =>
        new Promise<string>((resolve) => {
          const socket = tls.connect({ ...options, host: ip, port: DAEMON_TLS_PORT });
          socket.once('secureConnect', () => {
            socket.destroy();
            resolve('connected');
          });
          socket.once('error', (err: NodeJS.ErrnoException) => resolve(err.code ?? err.message));
        });
      expect(await attempt(daemonTlsClientOptions(randomBytes(24).toString('hex')))).not.toBe('connected');
      expect(await attempt({ rejectUnauthorized: false })).not.toBe('connected');
      // The right key does connect: the two refusals above are about the key, not the address.
      expect(await attempt(daemonTlsClientOptions(spec.daemonSecret))).toBe('connected');
    });

    it('is refused by the daemon when it holds the TLS key but another bearer token', async () => {
      await expect(probeAgent(provider.daemon(spec.agentId), 'x'.repeat(48), 15_000)).rejects.toMatchObject({ code: 'UPSTREAM_UNAVAILABLE' });
    });
  });
});
