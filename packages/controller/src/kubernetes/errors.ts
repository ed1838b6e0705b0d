import { CodedError } from '@warren/protocol';

/** What the API server says about a refusal: a `Status` object's reason and message. */
export interface ApiRefusal {
  /** The HTTP status (0 when the server was not reached). */
  code: number;
  /** The Status `reason` (`Forbidden`, `AlreadyExists`, `Conflict`, ...), when there is one. */
  reason: string | undefined;
  message: string;
}

/** Reads a client-node failure (`ApiException` with `code` and `body`, or a network error) without trusting its shape. */
export function readRefusal(err: unknown): ApiRefusal {
  const e = err as { code?: unknown; body?: unknown; message?: unknown } | undefined;
  const network = typeof e?.code === 'string' ? e.code : undefined;
  let body: unknown = e?.body;
  if (typeof body === 'string') {
    try {
      body = JSON.parse(body);
    } catch {
      // a body that is not a Status: its text is the message
    }
  }
  const status = (typeof body === 'object' && body !== null ? body : {}) as { reason?: unknown; message?: unknown };
  const message =
    typeof status.message === 'string'
      ? status.message
      : typeof body === 'string' && body.length > 0
        ? body.slice(0, 500)
        : typeof e?.message === 'string'
          ? e.message
          : String(err);
  return {
    code: typeof e?.code === 'number' ? e.code : 0,
    reason: typeof status.reason === 'string' ? status.reason : network,
    message,
  };
}

/**
 * Maps a failure of the Kubernetes API to Warren's typed error, with the cluster's own reason in
 * the message: 403 is `FORBIDDEN` naming the Role (or the quota that refused), 404 `SANDBOX_NOT_FOUND`,
 * 409 `CONFLICT`, 422 `INVALID_PARAMS`, a quota refusal `RESOURCE_EXHAUSTED`, and anything else,
 * an unreachable server included, `UPSTREAM_UNAVAILABLE`.
 *
 * @example
 * await api.createNamespacedPod({ namespace, body }).catch((e) => { throw kubeError(e, 'create pod x'); });
 */
export function kubeError(err: unknown, doing: string): CodedError {
  if (err instanceof CodedError) return err;
  const { code, reason, message } = readRefusal(err);
  const detail = `${message}${reason ? ` (${reason})` : ''}`;
  if (code === 0)
    return new CodedError(
      'UPSTREAM_UNAVAILABLE',
      `Could not ${doing}: the Kubernetes API server is not reachable (${detail}). Check kubernetes.kubeconfig, or that the controller runs in the cluster.`,
    );
  if (code === 403 && /exceeded quota|forbidden: exceeded/i.test(message))
    return new CodedError('RESOURCE_EXHAUSTED', `Could not ${doing}: the namespace's ResourceQuota refused it: ${detail}. Kill sandboxes or raise the quota.`);
  if (code === 401)
    return new CodedError('UPSTREAM_UNAVAILABLE', `Could not ${doing}: the Kubernetes API server did not accept the controller's credentials: ${detail}.`);
  if (code === 403)
    return new CodedError(
      'FORBIDDEN',
      `Could not ${doing}: the cluster refused the controller: ${detail}. Bind the Role in deploy/kubernetes/rbac.yaml to the controller's ServiceAccount.`,
    );
  if (code === 404) return new CodedError('SANDBOX_NOT_FOUND', `Could not ${doing}: ${detail}`);
  if (code === 409) return new CodedError('CONFLICT', `Could not ${doing}: ${detail}`);
  if (code === 422 || code === 400) return new CodedError('INVALID_PARAMS', `Could not ${doing}: the cluster rejected the pod: ${detail}`);
  if (code === 429) return new CodedError('RESOURCE_EXHAUSTED', `Could not ${doing}: the API server asks to slow down: ${detail}`);
  return new CodedError('UPSTREAM_UNAVAILABLE', `Could not ${doing}: the Kubernetes API server answered ${code}: ${detail}`);
}
