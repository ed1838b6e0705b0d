import { ERROR_CODES, type ErrorCode, type WireErrorBody } from '@warren/protocol';

/** Conditions the SDK detects itself; they never cross the wire. */
export const LOCAL_ERROR_CODES = {
  REQUEST_TIMEOUT: { suggestion: 'The call took longer than its timeoutMs; pass a larger timeoutMs or do less per call.', retryable: true },
  CONNECTION_CLOSED: { suggestion: 'The connection to the sandbox closed; reconnect with Sandbox.connect(id) and call again.', retryable: true },
} as const;
export type LocalErrorCode = keyof typeof LOCAL_ERROR_CODES;

/** Every code a {@link WarrenError} can carry. */
export type WarrenErrorCode = ErrorCode | LocalErrorCode;

const RETRYABLE: ReadonlySet<WarrenErrorCode> = new Set<WarrenErrorCode>(['SANDBOX_NOT_READY', 'UPSTREAM_UNAVAILABLE', 'RESOURCE_EXHAUSTED', 'REQUEST_TIMEOUT', 'CONNECTION_CLOSED']);

/**
 * The base of every error the SDK throws. `code` is stable and machine-readable, `message` says
 * what failed, `suggestion` says what to do next; both are written to be read by a model.
 *
 * @example
 * try { await sandbox.files.read('missing.txt'); }
 * catch (err) { if (err instanceof NotFoundError) console.log(err.suggestion); }
 */
export class WarrenError extends Error {
  readonly code: WarrenErrorCode;
  readonly suggestion: string;
  readonly details: Record<string, unknown> | undefined;

  constructor(code: WarrenErrorCode, message: string, options: { details?: Record<string, unknown> | undefined; cause?: unknown } = {}) {
    super(message, options.cause === undefined ? undefined : { cause: options.cause });
    this.name = new.target.name;
    this.code = code;
    this.details = options.details;
    this.suggestion = code in LOCAL_ERROR_CODES ? LOCAL_ERROR_CODES[code as LocalErrorCode].suggestion : ERROR_CODES[code as ErrorCode].suggestion;
  }

  /** True when the same call may succeed if made again later. */
  get isRetryable(): boolean {
    return RETRYABLE.has(this.code);
  }

  toJSON(): Record<string, unknown> {
    return { name: this.name, code: this.code, message: this.message, suggestion: this.suggestion, details: this.details, isRetryable: this.isRetryable };
  }
}

type ErrorClass = new (message: string, options?: { details?: Record<string, unknown> | undefined; cause?: unknown }) => WarrenError;

function errorClass(code: WarrenErrorCode, name: string): ErrorClass {
  const cls = class extends WarrenError {
    constructor(message: string, options?: { details?: Record<string, unknown> | undefined; cause?: unknown }) {
      super(code, message, options);
    }
  };
  Object.defineProperty(cls, 'name', { value: name });
  return cls;
}

// One class per code, so callers can `instanceof` the case they handle.
export const InvalidFrameError = errorClass('INVALID_FRAME', 'InvalidFrameError');
export const FrameTooLargeError = errorClass('FRAME_TOO_LARGE', 'FrameTooLargeError');
export const UnknownMethodError = errorClass('UNKNOWN_METHOD', 'UnknownMethodError');
export const InvalidParamsError = errorClass('INVALID_PARAMS', 'InvalidParamsError');
export const ProtocolVersionMismatchError = errorClass('PROTOCOL_VERSION_MISMATCH', 'ProtocolVersionMismatchError');
export const HandshakeRequiredError = errorClass('HANDSHAKE_REQUIRED', 'HandshakeRequiredError');
export const DuplicateRequestIdError = errorClass('DUPLICATE_REQUEST_ID', 'DuplicateRequestIdError');
export const UnauthorizedError = errorClass('UNAUTHORIZED', 'UnauthorizedError');
export const ForbiddenError = errorClass('FORBIDDEN', 'ForbiddenError');
export const NotFoundError = errorClass('NOT_FOUND', 'NotFoundError');
export const IsADirectoryError = errorClass('IS_A_DIRECTORY', 'IsADirectoryError');
export const NotADirectoryError = errorClass('NOT_A_DIRECTORY', 'NotADirectoryError');
export const AlreadyExistsError = errorClass('ALREADY_EXISTS', 'AlreadyExistsError');
export const PathNotInSandboxError = errorClass('PATH_NOT_IN_SANDBOX', 'PathNotInSandboxError');
export const PathNotWritableError = errorClass('PATH_NOT_WRITABLE', 'PathNotWritableError');
export const PermissionEscalationError = errorClass('PERMISSION_ESCALATION', 'PermissionEscalationError');
export const SuffixNotAllowedError = errorClass('SUFFIX_NOT_ALLOWED', 'SuffixNotAllowedError');
export const FileTooLargeError = errorClass('FILE_TOO_LARGE', 'FileTooLargeError');
export const EditNotFoundError = errorClass('EDIT_NOT_FOUND', 'EditNotFoundError');
export const EditNotUniqueError = errorClass('EDIT_NOT_UNIQUE', 'EditNotUniqueError');
export const StaleAnchorError = errorClass('STALE_ANCHOR', 'StaleAnchorError');
export const ConflictError = errorClass('CONFLICT', 'ConflictError');
export const UnsupportedFileTypeError = errorClass('UNSUPPORTED_FILE_TYPE', 'UnsupportedFileTypeError');
export const SymlinkLoopError = errorClass('SYMLINK_LOOP', 'SymlinkLoopError');
export const DirectoryNotEmptyError = errorClass('DIRECTORY_NOT_EMPTY', 'DirectoryNotEmptyError');
export const ApprovalDeniedError = errorClass('APPROVAL_DENIED', 'ApprovalDeniedError');
export const CancelledError = errorClass('CANCELLED', 'CancelledError');
export const ResourceExhaustedError = errorClass('RESOURCE_EXHAUSTED', 'ResourceExhaustedError');
export const SandboxNotFoundError = errorClass('SANDBOX_NOT_FOUND', 'SandboxNotFoundError');
export const SandboxNotReadyError = errorClass('SANDBOX_NOT_READY', 'SandboxNotReadyError');
export const UpstreamUnavailableError = errorClass('UPSTREAM_UNAVAILABLE', 'UpstreamUnavailableError');
export const PtyUnavailableError = errorClass('PTY_UNAVAILABLE', 'PtyUnavailableError');
export const InternalError = errorClass('INTERNAL', 'InternalError');
export const MethodNotAllowedError = errorClass('METHOD_NOT_ALLOWED', 'MethodNotAllowedError');
export const RequestTimeoutError = errorClass('REQUEST_TIMEOUT', 'RequestTimeoutError');
export const ConnectionClosedError = errorClass('CONNECTION_CLOSED', 'ConnectionClosedError');

const BY_CODE: { [C in WarrenErrorCode]: ErrorClass } = {
  INVALID_FRAME: InvalidFrameError,
  FRAME_TOO_LARGE: FrameTooLargeError,
  UNKNOWN_METHOD: UnknownMethodError,
  INVALID_PARAMS: InvalidParamsError,
  PROTOCOL_VERSION_MISMATCH: ProtocolVersionMismatchError,
  HANDSHAKE_REQUIRED: HandshakeRequiredError,
  DUPLICATE_REQUEST_ID: DuplicateRequestIdError,
  UNAUTHORIZED: UnauthorizedError,
  FORBIDDEN: ForbiddenError,
  NOT_FOUND: NotFoundError,
  IS_A_DIRECTORY: IsADirectoryError,
  NOT_A_DIRECTORY: NotADirectoryError,
  ALREADY_EXISTS: AlreadyExistsError,
  PATH_NOT_IN_SANDBOX: PathNotInSandboxError,
  PATH_NOT_WRITABLE: PathNotWritableError,
  PERMISSION_ESCALATION: PermissionEscalationError,
  SUFFIX_NOT_ALLOWED: SuffixNotAllowedError,
  FILE_TOO_LARGE: FileTooLargeError,
  EDIT_NOT_FOUND: EditNotFoundError,
  EDIT_NOT_UNIQUE: EditNotUniqueError,
  STALE_ANCHOR: StaleAnchorError,
  CONFLICT: ConflictError,
  UNSUPPORTED_FILE_TYPE: UnsupportedFileTypeError,
  SYMLINK_LOOP: SymlinkLoopError,
  DIRECTORY_NOT_EMPTY: DirectoryNotEmptyError,
  APPROVAL_DENIED: ApprovalDeniedError,
  CANCELLED: CancelledError,
  RESOURCE_EXHAUSTED: ResourceExhaustedError,
  SANDBOX_NOT_FOUND: SandboxNotFoundError,
  SANDBOX_NOT_READY: SandboxNotReadyError,
  UPSTREAM_UNAVAILABLE: UpstreamUnavailableError,
  PTY_UNAVAILABLE: PtyUnavailableError,
  INTERNAL: InternalError,
  METHOD_NOT_ALLOWED: MethodNotAllowedError,
  REQUEST_TIMEOUT: RequestTimeoutError,
  CONNECTION_CLOSED: ConnectionClosedError,
};

/** Builds the SDK error for a code, as its own subclass. */
export function makeError(code: WarrenErrorCode, message: string, options?: { details?: Record<string, unknown> | undefined; cause?: unknown }): WarrenError {
  const cls = BY_CODE[code] ?? InternalError;
  return new cls(message, options);
}

/** Turns a wire error body into its SDK error class. */
export function errorFromWire(body: WireErrorBody): WarrenError {
  return makeError(body.code, body.message, { details: body.details });
}
