import { once } from 'node:events';
import { mkdtemp, rm } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { AuditTrail } from '../src/audit/trail.js';
import { createHttpServer, serverUrl } from '../src/http.js';
import { Credentials } from '../src/credentials.js';
import { createLogger } from '../src/logger.js';
import { loadConfig } from '../src/config.js';
import { Metrics } from '../src/metrics.js';
import { SandboxService } from '../src/sandboxes.js';
import { FakeProvider } from './fakes.js';
import { SnapshotService } from '../src/snapshots.js';
import { SnapshotStore } from '../src/snapshot-store.js';
import { VolumeService } from '../src/volumes.js';
import { EventLog } from '../src/events/event-log.js';
import { TargetGuard } from '../src/events/webhook-target.js';
import { WebhookStore } from '../src/events/webhook-store.js';
import { WebhookService } from '../src/events/webhooks.js';

/** The API key of {@link startFakeHttpServer}'s controller. */
export const API_KEY = 'wk_unit_0123456789abcdef';

/** The controller's HTTP server on a loopback port over the fake provider, with every log line kept. */
export interface FakeHttpServer extends AsyncDisposable {
  url: string;
  sandboxes: SandboxService;
  metrics: Metrics;
  /** The event log and webhooks behind `/v1/events` and `/v1/webhooks`; deliveries are dropped, never sent. */
  events: { log: EventLog; webhooks: WebhookService };
  /** Every log line written, parsed, in order. */
  lines: ({ msg: string; level: string } & Record<string, unknown>)[];
  /** Every log line as written, for searches that must not find a secret anywhere. */
  raw: string[];
}

/**
 * Starts the REST server and the upgrade handler of the controller (the same `createHttpServer`
 * the controller uses) over a fake provider, logging at `debug` into memory.
 *
 * @example
 * await using server = await startFakeHttpServer();
 * await fetch(`${server.url}/healthz`);
 */
export async function startFakeHttpServer(): Promise<FakeHttpServer> {
  const stateDir = await mkdtemp(path.join(os.tmpdir(), 'warren-http-'));
  const raw: string[] = [];
  const lines: FakeHttpServer['lines'] = [];
  const logger = createLogger({
    level: 'debug',
    destination: {
      write: (line: string) => {
        raw.push(line);
        lines.push(JSON.parse(line) as FakeHttpServer['lines'][number]);
      },
    },
  });
  const config = loadConfig({}, { stateDir, port: 0, host: '127.0.0.1' });
  const credentials = Credentials.inMemory(API_KEY);
  const metrics = new Metrics();
  const provider = new FakeProvider();
  const audit = await AuditTrail.open({ dir: path.join(stateDir, 'audit') });
  const sandboxes = new SandboxService({ provider, credentials, config, metrics, probe: async () => undefined, audit });
  await sandboxes.recover();
  const volumes = new VolumeService({ sandboxes, provider, config });
  await volumes.recover();
  const snapshots = new SnapshotService({ sandboxes, provider, store: new SnapshotStore(stateDir), limits: config.snapshots, volumes });
  await snapshots.recover();
  const log = await EventLog.open({ retain: 1000 });
  sandboxes.lifecycle.subscribe((report) => log.append(report));
  const guard = new TargetGuard({ allowedCidrs: ['127.0.0.1/32'], allowPrivateTargets: false }, () => undefined);
  const webhooks = new WebhookService({ store: await WebhookStore.load(undefined), log, guard, settings: config.webhooks, send: async () => undefined });
  webhooks.start();
  const events = { log, webhooks };
  const { server, wss } = createHttpServer({
    events,
    sandboxes,
    snapshots,
    volumes,
    credentials,
    config,
    metrics,
    logger,
    readiness: async () => ({ provider: 'fake', defaultImage: config.defaultImage }),
    audit,
  });
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  const close = async () => {
    await webhooks.close();
    for (const ws of wss.clients) ws.terminate();
    server.closeAllConnections();
    await new Promise<void>((resolve) => server.close(() => resolve()));
    await audit.close();
    await rm(stateDir, { recursive: true, force: true });
  };
  return { url: serverUrl(server, '127.0.0.1'), sandboxes, metrics, events, lines, raw, [Symbol.asyncDispose]: close };
}
