import type { AuditTrail } from './audit/trail.js';
import type { ControllerConfig } from './config.js';
import type { Credentials } from './credentials.js';
import type { EgressLog } from './egress/egress-log.js';
import type { EventLog } from './events/event-log.js';
import type { WebhookService } from './events/webhooks.js';
import type { Logger } from './logger.js';
import type { Metrics } from './metrics.js';
import type { SandboxService } from './sandboxes.js';
import type { SnapshotService } from './snapshots.js';
import type { VolumeService } from './volumes.js';

/**
 * What the HTTP server and everything it serves (the route table, the E2B gateway, the port proxy,
 * the console) work with. A module of its own, importing only types from the rooms below the
 * server, so the server's parts can name it without importing the server.
 *
 * @example
 * const context: HttpServerDeps = { sandboxes, credentials, config, metrics, logger, readiness, audit };
 * createHttpServer(context);
 */
export interface HttpServerDeps {
  sandboxes: SandboxService;
  /** Snapshots and forks (docs/state.md); absent, their routes answer NOT_SUPPORTED. */
  snapshots?: SnapshotService | undefined;
  /** Named volumes (docs/state.md#volumes); absent, their routes answer NOT_SUPPORTED. */
  volumes?: VolumeService | undefined;
  credentials: Credentials;
  config: ControllerConfig;
  metrics: Metrics;
  /** Event lines and one access line per request and per WebSocket connection. */
  logger: Logger;
  /** `/readyz`: resolves when Docker answers and the default image is present. */
  readiness: () => Promise<Record<string, unknown>>;
  /** The sandboxes' recent egress gateway events (`GET /v1/sandboxes/:id/egress`); absent without a gateway. */
  egressLog?: EgressLog | undefined;
  /** Lifecycle events and webhooks (`/v1/events`, `/v1/webhooks`, docs/events.md); absent, their routes answer NOT_SUPPORTED. */
  events?: { log: EventLog; webhooks: WebhookService } | undefined;
  /** The durable audit trail (`GET /v1/sandboxes/:id/audit`, `GET /v1/audit`). */
  audit: AuditTrail;
}
