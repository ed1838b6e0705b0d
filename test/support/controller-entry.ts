// A controller as its own process, for tests that kill it (SIGKILL) and start it again. It reads
// its settings from WARREN_* variables, prints one JSON line with its URL, and closes on SIGTERM.
// WARREN_TEST_EGRESS_UPSTREAM_CA names a PEM file of the test's own CA, which the egress gateway
// then trusts for upstreams the test made (as `egressUpstreamCa` does for in-process controllers).
import { readFileSync } from 'node:fs';
import { startController, silentLogger } from '@warren/controller';

const upstreamCa = process.env.WARREN_TEST_EGRESS_UPSTREAM_CA;
const controller = await startController({
  logger: silentLogger(),
  ...(upstreamCa ? { egressUpstreamCa: [readFileSync(upstreamCa, 'utf8')] } : {}),
});
process.stdout.write(`${JSON.stringify({ url: controller.url, instanceId: controller.sandboxes.credentials.instanceId })}\n`);
process.once('SIGTERM', () => void controller.close().then(() => process.exit(0)));
