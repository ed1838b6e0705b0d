// A controller as its own process, for tests that kill it (SIGKILL) and start it again. It reads
// its settings from WARREN_* variables, prints one JSON line with its URL, and closes on SIGTERM.
import { startController, silentLogger } from '@warren/controller';

const controller = await startController({ logger: silentLogger() });
process.stdout.write(`${JSON.stringify({ url: controller.url, instanceId: controller.sandboxes.credentials.instanceId })}\n`);
process.once('SIGTERM', () => void controller.close().then(() => process.exit(0)));
