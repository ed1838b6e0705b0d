import type { Logger } from '../logger.js';
import type { Metrics } from '../metrics.js';
import type { EgressEvent } from './events.js';

/**
 * The controller's handler for gateway events: Prometheus counters with bounded labels (kind,
 * decision, reason code; never host or sandbox) and one structured log line per attempt (the
 * event as it is: host, port, method, path without query, rule, bytes, secret names, no values),
 * then `forward` (e.g. into the sandbox's audit log).
 *
 * @example
 * const gateway = new EgressGateway({ operator: config.egress, onEvent: egressEventSink({ metrics, logger }) });
 */
export function egressEventSink(options: { metrics?: Metrics; logger?: Logger; forward?: (event: EgressEvent) => void }): (event: EgressEvent) => void {
  return (event) => {
    options.metrics?.egress.inc({ kind: event.kind, decision: event.decision, reason: event.reason ?? 'allowed' });
    if (event.kind !== 'dns') {
      options.metrics?.egressBytes.inc({ direction: 'out' }, event.bytesOut);
      options.metrics?.egressBytes.inc({ direction: 'in' }, event.bytesIn);
    }
    options.logger?.info({ ...event }, `egress.${event.decision}`);
    options.forward?.(event);
  };
}
