import { AUDIT_TRAIL_COMMAND_CHARS, auditCommand, auditPaths, type AuditCallerKind } from '@warren/protocol';
import type { Caller } from '../grants.js';
import type { AuditTrail } from './trail.js';

/** Who made a call, as its trail entry names them. */
export interface Attribution {
  callerKind: AuditCallerKind;
  /**
   * The API key behind the call: the key itself; for the sandbox's own token, the key that
   * created the sandbox (the token was handed to it); for a derived token, the key that minted it.
   */
  keyId?: string | undefined;
  /** The tenant of the sandbox. */
  tenant: string;
  /** The derived token it came with. */
  tokenId?: string | undefined;
}

/** What the attribution needs of the sandbox: its tenant and the key that created it (`SandboxRecord` has both). */
export interface AuditedSandbox {
  tenant: string;
  creatorKeyId?: string | undefined;
}

/**
 * The attribution of `caller`'s calls on `sandbox`: an API key names itself; the sandbox's own
 * token the key that created the sandbox, when it is known; a derived token the key that minted it
 * and its own id.
 *
 * @example
 * attributionOf({ kind: 'derived', sandboxId, grant, keyId: 'k1', tokenId: 't1' }, { tenant: 'acme' });
 * // { callerKind: 'derived', keyId: 'k1', tenant: 'acme', tokenId: 't1' }
 */
export function attributionOf(caller: Caller, sandbox: AuditedSandbox): Attribution {
  const { tenant } = sandbox;
  if (caller.kind === 'operator') return { callerKind: 'operator', keyId: caller.keyId, tenant };
  if (caller.kind === 'sandbox')
    return sandbox.creatorKeyId === undefined ? { callerKind: 'sandbox', tenant } : { callerKind: 'sandbox', keyId: sandbox.creatorKeyId, tenant };
  return {
    callerKind: 'derived',
    tenant,
    ...(caller.keyId === undefined ? {} : { keyId: caller.keyId }),
    ...(caller.tokenId === undefined ? {} : { tokenId: caller.tokenId }),
  };
}

/**
 * Methods the trail leaves out, as the daemon's ring does: reading the audit log itself, and the
 * egress relay's per-chunk `egress.send` (the controller's own channel; its connections are the
 * egress log's).
 */
export const UNAUDITED_METHODS: ReadonlySet<string> = new Set(['audit.list', 'egress.send']);

/** One call in flight, until its answer: {@link CallAudit.begin} returns it. */
export interface AuditedCall {
  /** Payload bytes the daemon sent for the call (its events and its answer). */
  answered(bytes: number): void;
  /** The call ended: `ok` or its error code. Writes the entry; later calls do nothing. */
  end(outcome: string): void;
}

/**
 * The trail's recorder for one sandbox and one caller: each call the controller passes on to the
 * sandbox's daemon (the relay's frames, the controller's own daemon sessions) begins here and
 * ends with its outcome, and is then appended, attributed, to the {@link AuditTrail}. The paths
 * and the command are read from the params exactly as the daemon's ring reads them, the command
 * cut at 8 KiB instead of 200 characters.
 *
 * @example
 * const audit = new CallAudit(trail, 'sb1', attributionOf(caller, record));
 * const call = audit.begin('process.exec', { cmd: 'ls' }, 0);
 * call?.answered(120);
 * call?.end('ok');
 */
export class CallAudit {
  constructor(
    private readonly trail: AuditTrail,
    readonly sandboxId: string,
    readonly attribution: Attribution,
  ) {}

  /** A call is sent with `params` and `bytesIn` payload bytes; undefined for a method the trail leaves out. */
  begin(method: string, params: unknown, bytesIn: number): AuditedCall | undefined {
    if (UNAUDITED_METHODS.has(method)) return undefined;
    const time = new Date().toISOString();
    const started = performance.now();
    const paths = auditPaths(params);
    const command = auditCommand(params, AUDIT_TRAIL_COMMAND_CHARS);
    let bytesOut = 0;
    let ended = false;
    return {
      answered: (bytes) => void (bytesOut += bytes),
      end: (outcome) => {
        if (ended) return;
        ended = true;
        this.trail.append(this.sandboxId, {
          time,
          method: method.slice(0, 100),
          paths,
          ...(command === undefined ? {} : { command }),
          outcome,
          bytesIn,
          bytesOut,
          durationMs: performance.now() - started,
          ...this.attribution,
        });
      },
    };
  }

  /** A call refused before it reached the daemon (by the per-frame access check): recorded with its refusal. */
  refused(method: string, params: unknown, bytesIn: number, code: string): void {
    this.begin(method, params, bytesIn)?.end(code);
  }
}
