import { Code, ConnectError } from '@connectrpc/connect';
import { CodedError, ERROR_CODES, type ErrorCode } from '@warren/protocol';

/** Warren's error codes as Connect codes, which the `e2b` SDK turns into its own error classes (docs/e2b.md). */
const CONNECT_CODES: { readonly [C in ErrorCode]: Code } = {
  INVALID_FRAME: Code.InvalidArgument,
  FRAME_TOO_LARGE: Code.ResourceExhausted,
  UNKNOWN_METHOD: Code.Unimplemented,
  METHOD_NOT_ALLOWED: Code.Unimplemented,
  INVALID_PARAMS: Code.InvalidArgument,
  PROTOCOL_VERSION_MISMATCH: Code.Internal,
  HANDSHAKE_REQUIRED: Code.Internal,
  DUPLICATE_REQUEST_ID: Code.Internal,
  UNAUTHORIZED: Code.Unauthenticated,
  FORBIDDEN: Code.PermissionDenied,
  NOT_FOUND: Code.NotFound,
  IS_A_DIRECTORY: Code.InvalidArgument,
  NOT_A_DIRECTORY: Code.InvalidArgument,
  ALREADY_EXISTS: Code.AlreadyExists,
  PATH_NOT_IN_SANDBOX: Code.PermissionDenied,
  PATH_NOT_WRITABLE: Code.PermissionDenied,
  PERMISSION_ESCALATION: Code.PermissionDenied,
  SUFFIX_NOT_ALLOWED: Code.PermissionDenied,
  FILE_TOO_LARGE: Code.ResourceExhausted,
  EDIT_NOT_FOUND: Code.InvalidArgument,
  EDIT_NOT_UNIQUE: Code.InvalidArgument,
  STALE_ANCHOR: Code.Aborted,
  CONFLICT: Code.Aborted,
  UNSUPPORTED_FILE_TYPE: Code.InvalidArgument,
  SYMLINK_LOOP: Code.InvalidArgument,
  DIRECTORY_NOT_EMPTY: Code.InvalidArgument,
  APPROVAL_DENIED: Code.PermissionDenied,
  CANCELLED: Code.Canceled,
  RESOURCE_EXHAUSTED: Code.ResourceExhausted,
  SANDBOX_NOT_FOUND: Code.NotFound,
  SNAPSHOT_NOT_FOUND: Code.NotFound,
  VOLUME_NOT_FOUND: Code.NotFound,
  KEY_NOT_FOUND: Code.NotFound,
  SANDBOX_NOT_READY: Code.Unavailable,
  UPSTREAM_UNAVAILABLE: Code.Unavailable,
  PTY_UNAVAILABLE: Code.Unimplemented,
  NOT_SUPPORTED: Code.Unimplemented,
  PORT_UNREACHABLE: Code.Unavailable,
  KERNEL_DIED: Code.Aborted,
  IMAGE_NOT_ALLOWED: Code.PermissionDenied,
  IMAGE_PULL_FAILED: Code.Unavailable,
  IMAGE_TOO_LARGE: Code.ResourceExhausted,
  BUILD_CONTEXT_TOO_LARGE: Code.ResourceExhausted,
  BUILD_FAILED: Code.FailedPrecondition,
  INTERNAL: Code.Internal,
};

/** Any error as the Connect error an envd RPC answers with; a Warren code is kept in the message. */
export function toConnectError(err: unknown): ConnectError {
  if (err instanceof ConnectError) return err;
  if (err instanceof CodedError) return new ConnectError(err.message, CONNECT_CODES[err.code], undefined, undefined, err);
  return new ConnectError(err instanceof Error ? err.message : String(err), Code.Internal);
}

/** An error of E2B's REST APIs (control plane and envd `/files`): `{ code, message }` with the HTTP status as `code`. */
export class E2bHttpError extends Error {
  constructor(
    readonly status: number,
    message: string,
  ) {
    super(message);
    this.name = 'E2bHttpError';
  }
}

/** Any error as E2B's REST error: the status and message; a Warren code keeps its own HTTP status. */
export function toE2bHttpError(err: unknown): E2bHttpError {
  if (err instanceof E2bHttpError) return err;
  if (err instanceof CodedError) return new E2bHttpError(ERROR_CODES[err.code].status, err.message);
  return new E2bHttpError(500, err instanceof Error ? err.message : String(err));
}
