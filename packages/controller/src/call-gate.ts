import { ERROR_CODE_LIST, framePayloadLength, isMethodName, peekHeader, type RequestId } from '@warren/protocol';
import type { AuditedCall, CallAudit } from './audit/call-audit.js';
import { callRefusal, type Holder } from './grants.js';
import type { Metrics } from './metrics.js';
import { sizeRefusal } from './relay.js';

/** Calls one connection's gate times at once (metrics, and the idle freezer's holds); more are relayed untimed. */
export const MAX_TRACKED_CALLS = 10_000;

const KNOWN_CODES: ReadonlySet<string> = new Set(ERROR_CODE_LIST);

/** What {@link CallGate} tells the idle freezer: each call holds its sandbox awake until answered. */
export interface CallActivity {
  /** A call started; the returned function ends its hold. */
  hold(): () => void;
  /** Any other frame from the client. */
  touch(): void;
}

/** What {@link CallGate} needs for one relayed connection. */
export interface CallGateOptions {
  /** Who is calling, and the connection's grant: every request frame is checked against it. */
  holder: Holder;
  metrics: Metrics;
  /** The relay's cap on a client frame (`maxMessageBytes`). */
  maxMessageBytes: number;
  /** The idle freezer: each call in flight holds the sandbox awake until answered. */
  activity?: CallActivity | undefined;
  /** The durable audit trail's recorder for this sandbox and caller: each call, refused or answered, is appended. */
  audit?: CallAudit | undefined;
}

interface Tracked {
  method: string;
  started: number;
}

/**
 * The controller's look at the frames of one relayed connection, one JSON parse of each header
 * serving every purpose: the size cap and the per-frame access check on what the client sends
 * (a refused frame is answered with its id and never reaches the daemon), the call metrics
 * (`warren_calls_total`, `warren_call_seconds`, `warren_errors_total`) from request to final
 * answer, the idle freezer's holds, and the durable audit trail (each call's method, paths,
 * command, bytes each way, duration and outcome, a refused one's included). It never changes a
 * frame it passes on. Every header is read as hostile: one that is not JSON passes through
 * unobserved for the daemon to refuse, and an error code the protocol does not know counts as
 * `INTERNAL` (a daemon choosing label values would grow the metrics without end, or write what it
 * likes into the trail).
 *
 * @example
 * const gate = new CallGate({ holder, metrics, maxMessageBytes });
 * relay(client, agent, { allowFrame: (d) => gate.fromClient(d), observeAnswer: (d) => gate.fromDaemon(d) });
 * client.once('close', () => gate.close());
 */
export class CallGate {
  private readonly inFlight = new Map<RequestId, Tracked>();
  private readonly held = new Map<RequestId, () => void>();
  private readonly audited = new Map<RequestId, AuditedCall>();

  constructor(private readonly options: CallGateOptions) {}

  /** A frame from the client: undefined to pass it on, or the error frame to answer instead. */
  fromClient(data: Buffer): Buffer | undefined {
    const { activity, metrics } = this.options;
    const tooLarge = sizeRefusal(data, this.options.maxMessageBytes);
    if (tooLarge) {
      activity?.touch();
      return tooLarge;
    }
    const header = peekHeader(data);
    const type = header?.type;
    const id = header?.id;
    const validId = typeof id === 'number' || typeof id === 'string';
    if (type !== 'req') {
      if (activity) {
        if (type === 'cancel') this.release(id);
        else activity.touch();
      }
      return undefined;
    }
    const refusal = callRefusal(this.options.holder, header!, metrics);
    if (refusal) {
      activity?.touch();
      if (typeof header!.method === 'string') this.options.audit?.refused(header!.method, header!.params, framePayloadLength(data), 'FORBIDDEN');
      return refusal;
    }
    this.beginAudit(id, header!, data);
    if (activity && validId && !this.held.has(id) && this.held.size < MAX_TRACKED_CALLS) this.held.set(id, activity.hold());
    else activity?.touch();
    const method = header!.method;
    if (validId && typeof method === 'string' && isMethodName(method) && this.inFlight.size < MAX_TRACKED_CALLS) {
      this.inFlight.set(id, { method, started: performance.now() });
    }
    return undefined;
  }

  /** A frame from the daemon, on its way to the client unchanged: a final answer ends its call's timing and hold. */
  fromDaemon(data: Buffer): void {
    const header = peekHeader(data);
    const type = header?.type;
    if (type === 'evt') this.audited.get(header!.id as RequestId)?.answered(framePayloadLength(data));
    if (type !== 'res' && type !== 'err') return;
    const id = header!.id;
    this.release(id);
    const { metrics } = this.options;
    let outcome = 'ok';
    if (type === 'err') {
      const code = (header!.error as { code?: unknown } | null | undefined)?.code;
      outcome = typeof code === 'string' && KNOWN_CODES.has(code) ? code : 'INTERNAL';
      metrics.errors.inc({ code: outcome, source: 'call' });
    }
    this.endAudit(id, data, outcome);
    if (typeof id !== 'number' && typeof id !== 'string') return;
    const call = this.inFlight.get(id);
    if (!call) return;
    this.inFlight.delete(id);
    metrics.calls.inc({ method: call.method, outcome: type === 'res' ? 'ok' : 'error' });
    metrics.callSeconds.observe({ method: call.method }, (performance.now() - call.started) / 1000);
  }

  /** The connection closed: its calls are no longer timed, release their holds, and go to the trail as CANCELLED. */
  close(): void {
    this.inFlight.clear();
    for (const call of this.audited.values()) call.end('CANCELLED');
    this.audited.clear();
    for (const end of this.held.values()) end();
    this.held.clear();
  }

  /** Starts the trail entry of a request the gate passes on. */
  private beginAudit(id: unknown, header: Record<string, unknown>, data: Buffer): void {
    const { audit } = this.options;
    if (!audit || (typeof id !== 'number' && typeof id !== 'string') || typeof header.method !== 'string') return;
    if (this.audited.has(id) || this.audited.size >= MAX_TRACKED_CALLS) return;
    const call = audit.begin(header.method, header.params, framePayloadLength(data));
    if (call) this.audited.set(id, call);
  }

  /** Ends the trail entry of the call a final answer is for. */
  private endAudit(id: unknown, data: Buffer, outcome: string): void {
    if (typeof id !== 'number' && typeof id !== 'string') return;
    const call = this.audited.get(id);
    if (!call) return;
    this.audited.delete(id);
    call.answered(framePayloadLength(data));
    call.end(outcome);
  }

  private release(id: unknown): void {
    if (typeof id !== 'number' && typeof id !== 'string') return;
    const end = this.held.get(id);
    if (!end) return;
    this.held.delete(id);
    end();
  }
}
