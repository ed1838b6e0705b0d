import { Writable } from 'node:stream';
import { afterAll, beforeAll, describe } from '@jest/globals';
import { Exec } from '@kubernetes/client-node';
import { probeAgent, type KubernetesProvider } from '@warren/controller';
import { openK8sFixture, type K8sFixture } from '../support/k8s-cluster.js';
import { providerContract } from '../support/provider-contract.js';

// A real two-node cluster (scripts/lib/k8s-cluster.sh), the provider acting as a user that holds
// only the shipped Role: the same contract the Docker provider keeps.
describe('the Kubernetes provider keeps the provider contract', () => {
  let fixture: K8sFixture;
  let provider: KubernetesProvider;

  beforeAll(async () => {
    fixture = await openK8sFixture();
    provider = await fixture.provider();
  }, 180_000);
  afterAll(async () => {
    await fixture?.close();
  });

  providerContract(() => ({
    provider,
    spec: () => fixture.spec(),
    // The daemon SIGKILLed from outside (as root, by the admin): the container ends and the pod fails.
    stopFromOutside: async (handle) => {
      const exec = new Exec(fixture.admin);
      const script =
        "for (const p of require('fs').readdirSync('/proc')) { try { if (Number(p) !== process.pid && require('fs').readFileSync('/proc/'+p+'/cmdline','utf8').includes('warren-agent.mjs')) process.kill(Number(p), 'SIGKILL') } catch {} }";
      await new Promise<void>((resolve, reject) => {
        exec
          .exec(
            fixture.namespace,
            handle,
            'sandbox',
            ['/opt/warren/ld-linux.so', '--library-path', '/opt/warren/lib', '/opt/warren/node', '-e', script],
            // The API server wants at least one stream.
            new Writable({ write: (_chunk, _encoding, done) => done() }),
            null,
            null,
            false,
            () => resolve(),
          )
          .then((ws) => ws.once('close', () => resolve()), reject);
      });
    },
    probe: (endpoint, secret) => probeAgent(endpoint, secret, 5000),
    capabilities: ['metrics', 'sharedRecords', 'sharedState'],
  }));
});
