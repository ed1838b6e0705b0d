import type { Clock } from '../clock.js';
import type { ControllerConfig } from '../config.js';
import type { Credentials } from '../credentials.js';
import type { LifecycleHook } from '../events/lifecycle.js';
import type { SandboxEgress } from '../egress/sandbox-egress.js';
import type { FrozenMarks } from '../idle-freezer.js';
import type { Metrics } from '../metrics.js';
import type { DaemonEndpoint, SandboxProvider, SharedRecords, SharedState } from '../provider.js';
import type { SandboxTable } from '../sandbox-table.js';

/**
 * A real call to a daemon (`hello` + `system.info`), with the upgrade's extra headers (a grant);
 * unit tests with a fake provider replace it.
 */
export type DaemonProbe = (endpoint: DaemonEndpoint, secret: string, timeoutMs: number, headers?: Record<string, string>) => Promise<unknown>;

/**
 * What the sandbox service's modules share: the backend, the keys, the configuration, the table of
 * records and where records are stored, made once by {@link SandboxService} and handed to each
 * module's constructor.
 */
export interface SandboxParts {
  readonly provider: SandboxProvider;
  readonly credentials: Credentials;
  readonly config: ControllerConfig;
  readonly table: SandboxTable;
  /** Where moved expiries, pool claims and public ports are stored: the backend's shared records, or the state folder's. */
  readonly store: Pick<SharedRecords, 'readAll' | 'write' | 'remove'>;
  /** The backend's own records, shared with other controller replicas, when it keeps them. */
  readonly shared: SharedRecords | undefined;
  /** What the backend shares with other replicas besides records (egress, the sandbox count), when it does. */
  readonly sharedState: SharedState | undefined;
  /** Which containers the idle freezer froze, kept in the state folder across restarts. */
  readonly frozenMarks: FrozenMarks;
  readonly clock: Clock;
  readonly metrics: Metrics | undefined;
  /** The egress gateway's wiring, when this controller runs one. */
  readonly egress: SandboxEgress | undefined;
  readonly probe: DaemonProbe;
  /** Where lifecycle changes are reported (created, paused, killed, ...): the event log and webhooks listen. */
  readonly lifecycle: LifecycleHook;
}
