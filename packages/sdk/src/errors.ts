import { ERROR_CODES, type ErrorCode, type WireErrorBody } from '@warren/protocol';

/** Conditions the SDK detects itself; they never cross the wire. */
export const LOCAL_ERROR_CODES = {
  REQUEST_TIMEOUT: { suggestion: 'The call took longer than its timeoutMs; pass a larger timeoutMs or do less per call.', retryable: true },
  CONNECTION_CLOSED: { suggestion: 'The connection to the sandbox closed; reconnect with Sandbox.connect(id) and call again.', retryable: true },
} as const;
export type LocalErrorCode = keyof typeof LOCAL_ERROR_CODES;

/** Every code a {@link WarrenError} can carry. */
export type WarrenErrorCode = ErrorCode | LocalErrorCode;

const RETRYABLE: ReadonlySet<WarrenErrorCode> = new Set<WarrenErrorCode>([
  'SANDBOX_NOT_READY',
  'UPSTREAM_UNAVAILABLE',
  'RESOURCE_EXHAUSTED',
  'REQUEST_TIMEOUT',
  'CONNECTION_CLOSED',
]);

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

  constructor(code: WarrenErrorCode, message: string, options: WarrenErrorOptions = {}) {
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

/** What every SDK error class takes besides its message. */
export interface WarrenErrorOptions {
  details?: Record<string, unknown> | undefined;
  cause?: unknown;
}

// Families: catch every error of one kind at once (`err instanceof WarrenNotFoundError`).

/** Family: things that do not exist: a path, a sandbox, the text an edit looks for, a method. */
export abstract class WarrenNotFoundError extends WarrenError {}

/** Family: the credential or the policy does not allow it. */
export abstract class WarrenForbiddenError extends WarrenError {}

/** Family: the state is not what the call expected: read again and retry. */
export abstract class WarrenConflictError extends WarrenError {}

/** Family: the call took longer than it was given. */
export abstract class WarrenTimeoutError extends WarrenError {}

/** Family: a size or count limit was reached. */
export abstract class WarrenLimitError extends WarrenError {}

/** Family: the call itself is wrong: its parameters, its target's kind, its frame. */
export abstract class WarrenInvalidInputError extends WarrenError {}

/** Family: the sandbox or the controller could not be reached or is not ready; usually worth a retry. */
export abstract class WarrenConnectionError extends WarrenError {}

// One class per code; each extends its family and narrows `code` to its own.

export class InvalidFrameError extends WarrenInvalidInputError {
  declare readonly code: 'INVALID_FRAME';
  constructor(message: string, options?: WarrenErrorOptions) {
    super('INVALID_FRAME', message, options);
  }
}

export class FrameTooLargeError extends WarrenLimitError {
  declare readonly code: 'FRAME_TOO_LARGE';
  constructor(message: string, options?: WarrenErrorOptions) {
    super('FRAME_TOO_LARGE', message, options);
  }
}

export class UnknownMethodError extends WarrenNotFoundError {
  declare readonly code: 'UNKNOWN_METHOD';
  constructor(message: string, options?: WarrenErrorOptions) {
    super('UNKNOWN_METHOD', message, options);
  }
}

export class InvalidParamsError extends WarrenInvalidInputError {
  declare readonly code: 'INVALID_PARAMS';
  constructor(message: string, options?: WarrenErrorOptions) {
    super('INVALID_PARAMS', message, options);
  }
}

export class ProtocolVersionMismatchError extends WarrenInvalidInputError {
  declare readonly code: 'PROTOCOL_VERSION_MISMATCH';
  constructor(message: string, options?: WarrenErrorOptions) {
    super('PROTOCOL_VERSION_MISMATCH', message, options);
  }
}

export class HandshakeRequiredError extends WarrenInvalidInputError {
  declare readonly code: 'HANDSHAKE_REQUIRED';
  constructor(message: string, options?: WarrenErrorOptions) {
    super('HANDSHAKE_REQUIRED', message, options);
  }
}

export class DuplicateRequestIdError extends WarrenConflictError {
  declare readonly code: 'DUPLICATE_REQUEST_ID';
  constructor(message: string, options?: WarrenErrorOptions) {
    super('DUPLICATE_REQUEST_ID', message, options);
  }
}

export class UnauthorizedError extends WarrenForbiddenError {
  declare readonly code: 'UNAUTHORIZED';
  constructor(message: string, options?: WarrenErrorOptions) {
    super('UNAUTHORIZED', message, options);
  }
}

export class ForbiddenError extends WarrenForbiddenError {
  declare readonly code: 'FORBIDDEN';
  constructor(message: string, options?: WarrenErrorOptions) {
    super('FORBIDDEN', message, options);
  }
}

export class NotFoundError extends WarrenNotFoundError {
  declare readonly code: 'NOT_FOUND';
  constructor(message: string, options?: WarrenErrorOptions) {
    super('NOT_FOUND', message, options);
  }
}

export class IsADirectoryError extends WarrenInvalidInputError {
  declare readonly code: 'IS_A_DIRECTORY';
  constructor(message: string, options?: WarrenErrorOptions) {
    super('IS_A_DIRECTORY', message, options);
  }
}

export class NotADirectoryError extends WarrenInvalidInputError {
  declare readonly code: 'NOT_A_DIRECTORY';
  constructor(message: string, options?: WarrenErrorOptions) {
    super('NOT_A_DIRECTORY', message, options);
  }
}

export class AlreadyExistsError extends WarrenConflictError {
  declare readonly code: 'ALREADY_EXISTS';
  constructor(message: string, options?: WarrenErrorOptions) {
    super('ALREADY_EXISTS', message, options);
  }
}

export class PathNotInSandboxError extends WarrenForbiddenError {
  declare readonly code: 'PATH_NOT_IN_SANDBOX';
  constructor(message: string, options?: WarrenErrorOptions) {
    super('PATH_NOT_IN_SANDBOX', message, options);
  }
}

export class PathNotWritableError extends WarrenForbiddenError {
  declare readonly code: 'PATH_NOT_WRITABLE';
  constructor(message: string, options?: WarrenErrorOptions) {
    super('PATH_NOT_WRITABLE', message, options);
  }
}

export class PermissionEscalationError extends WarrenForbiddenError {
  declare readonly code: 'PERMISSION_ESCALATION';
  constructor(message: string, options?: WarrenErrorOptions) {
    super('PERMISSION_ESCALATION', message, options);
  }
}

export class SuffixNotAllowedError extends WarrenForbiddenError {
  declare readonly code: 'SUFFIX_NOT_ALLOWED';
  constructor(message: string, options?: WarrenErrorOptions) {
    super('SUFFIX_NOT_ALLOWED', message, options);
  }
}

export class FileTooLargeError extends WarrenLimitError {
  declare readonly code: 'FILE_TOO_LARGE';
  constructor(message: string, options?: WarrenErrorOptions) {
    super('FILE_TOO_LARGE', message, options);
  }
}

export class EditNotFoundError extends WarrenNotFoundError {
  declare readonly code: 'EDIT_NOT_FOUND';
  constructor(message: string, options?: WarrenErrorOptions) {
    super('EDIT_NOT_FOUND', message, options);
  }
}

export class EditNotUniqueError extends WarrenInvalidInputError {
  declare readonly code: 'EDIT_NOT_UNIQUE';
  constructor(message: string, options?: WarrenErrorOptions) {
    super('EDIT_NOT_UNIQUE', message, options);
  }
}

export class StaleAnchorError extends WarrenConflictError {
  declare readonly code: 'STALE_ANCHOR';
  constructor(message: string, options?: WarrenErrorOptions) {
    super('STALE_ANCHOR', message, options);
  }
}

export class ConflictError extends WarrenConflictError {
  declare readonly code: 'CONFLICT';
  constructor(message: string, options?: WarrenErrorOptions) {
    super('CONFLICT', message, options);
  }
}

export class UnsupportedFileTypeError extends WarrenInvalidInputError {
  declare readonly code: 'UNSUPPORTED_FILE_TYPE';
  constructor(message: string, options?: WarrenErrorOptions) {
    super('UNSUPPORTED_FILE_TYPE', message, options);
  }
}

export class SymlinkLoopError extends WarrenInvalidInputError {
  declare readonly code: 'SYMLINK_LOOP';
  constructor(message: string, options?: WarrenErrorOptions) {
    super('SYMLINK_LOOP', message, options);
  }
}

export class DirectoryNotEmptyError extends WarrenConflictError {
  declare readonly code: 'DIRECTORY_NOT_EMPTY';
  constructor(message: string, options?: WarrenErrorOptions) {
    super('DIRECTORY_NOT_EMPTY', message, options);
  }
}

export class ApprovalDeniedError extends WarrenForbiddenError {
  declare readonly code: 'APPROVAL_DENIED';
  constructor(message: string, options?: WarrenErrorOptions) {
    super('APPROVAL_DENIED', message, options);
  }
}

export class CancelledError extends WarrenError {
  declare readonly code: 'CANCELLED';
  constructor(message: string, options?: WarrenErrorOptions) {
    super('CANCELLED', message, options);
  }
}

export class ResourceExhaustedError extends WarrenLimitError {
  declare readonly code: 'RESOURCE_EXHAUSTED';
  constructor(message: string, options?: WarrenErrorOptions) {
    super('RESOURCE_EXHAUSTED', message, options);
  }
}

export class SandboxNotFoundError extends WarrenNotFoundError {
  declare readonly code: 'SANDBOX_NOT_FOUND';
  constructor(message: string, options?: WarrenErrorOptions) {
    super('SANDBOX_NOT_FOUND', message, options);
  }
}

/** A snapshot that does not exist, was deleted, or belongs to another tenant (not told apart). */
export class SnapshotNotFoundError extends WarrenNotFoundError {
  declare readonly code: 'SNAPSHOT_NOT_FOUND';
  constructor(message: string, options?: WarrenErrorOptions) {
    super('SNAPSHOT_NOT_FOUND', message, options);
  }
}

/** A volume that does not exist or belongs to another tenant (not told apart). */
export class VolumeNotFoundError extends WarrenNotFoundError {
  declare readonly code: 'VOLUME_NOT_FOUND';
  constructor(message: string, options?: WarrenErrorOptions) {
    super('VOLUME_NOT_FOUND', message, options);
  }
}

/** No API key has that id (`/v1/keys`, admin keys only). */
export class KeyNotFoundError extends WarrenNotFoundError {
  declare readonly code: 'KEY_NOT_FOUND';
  constructor(message: string, options?: WarrenErrorOptions) {
    super('KEY_NOT_FOUND', message, options);
  }
}

export class SandboxNotReadyError extends WarrenConnectionError {
  declare readonly code: 'SANDBOX_NOT_READY';
  constructor(message: string, options?: WarrenErrorOptions) {
    super('SANDBOX_NOT_READY', message, options);
  }
}

export class UpstreamUnavailableError extends WarrenConnectionError {
  declare readonly code: 'UPSTREAM_UNAVAILABLE';
  constructor(message: string, options?: WarrenErrorOptions) {
    super('UPSTREAM_UNAVAILABLE', message, options);
  }
}

/**
 * A code context's kernel died (a crash, the sandbox's memory limit, a cell that ignored an
 * interrupt) and its state is gone: `sandbox.code.restartContext(id)` starts a fresh one.
 */
export class KernelDiedError extends WarrenError {
  declare readonly code: 'KERNEL_DIED';
  constructor(message: string, options?: WarrenErrorOptions) {
    super('KERNEL_DIED', message, options);
  }
}

export class PtyUnavailableError extends WarrenError {
  declare readonly code: 'PTY_UNAVAILABLE';
  constructor(message: string, options?: WarrenErrorOptions) {
    super('PTY_UNAVAILABLE', message, options);
  }
}

/** The controller's backend cannot do this at all (pause on Kubernetes, image builds on Podman, an engine that enforces no limits); the message says what can. */
export class NotSupportedError extends WarrenError {
  declare readonly code: 'NOT_SUPPORTED';
  constructor(message: string, options?: WarrenErrorOptions) {
    super('NOT_SUPPORTED', message, options);
  }
}

/** Nothing listens on the port a tunnel or port URL names inside the sandbox. */
export class PortUnreachableError extends WarrenConnectionError {
  declare readonly code: 'PORT_UNREACHABLE';
  constructor(message: string, options?: WarrenErrorOptions) {
    super('PORT_UNREACHABLE', message, options);
  }
}

export class InternalError extends WarrenError {
  declare readonly code: 'INTERNAL';
  constructor(message: string, options?: WarrenErrorOptions) {
    super('INTERNAL', message, options);
  }
}

export class MethodNotAllowedError extends WarrenInvalidInputError {
  declare readonly code: 'METHOD_NOT_ALLOWED';
  constructor(message: string, options?: WarrenErrorOptions) {
    super('METHOD_NOT_ALLOWED', message, options);
  }
}

export class RequestTimeoutError extends WarrenTimeoutError {
  declare readonly code: 'REQUEST_TIMEOUT';
  constructor(message: string, options?: WarrenErrorOptions) {
    super('REQUEST_TIMEOUT', message, options);
  }
}

export class ConnectionClosedError extends WarrenConnectionError {
  declare readonly code: 'CONNECTION_CLOSED';
  constructor(message: string, options?: WarrenErrorOptions) {
    super('CONNECTION_CLOSED', message, options);
  }
}

/** The image names a registry the controller does not pull from (its `allowedRegistries`), or is not a valid reference. */
export class ImageNotAllowedError extends WarrenForbiddenError {
  declare readonly code: 'IMAGE_NOT_ALLOWED';
  constructor(message: string, options?: WarrenErrorOptions) {
    super('IMAGE_NOT_ALLOWED', message, options);
  }
}

/** The engine could not pull the image: the registry refused or did not answer, or the image does not exist. */
export class ImagePullFailedError extends WarrenConnectionError {
  declare readonly code: 'IMAGE_PULL_FAILED';
  constructor(message: string, options?: WarrenErrorOptions) {
    super('IMAGE_PULL_FAILED', message, options);
  }
}

/** The image is larger than the controller's `images.maxPullMb`, or the engine's disk filled up; nothing of it was kept. */
export class ImageTooLargeError extends WarrenLimitError {
  declare readonly code: 'IMAGE_TOO_LARGE';
  constructor(message: string, options?: WarrenErrorOptions) {
    super('IMAGE_TOO_LARGE', message, options);
  }
}

/** The build context is larger than the cap (`maxContextBytes` in the SDK, `images.maxBuildContextMb` on the controller). */
export class BuildContextTooLargeError extends WarrenLimitError {
  declare readonly code: 'BUILD_CONTEXT_TOO_LARGE';
  constructor(message: string, options?: WarrenErrorOptions) {
    super('BUILD_CONTEXT_TOO_LARGE', message, options);
  }
}

/** A step of the Dockerfile failed; `details.output` holds the end of the build output. */
export class BuildFailedError extends WarrenInvalidInputError {
  declare readonly code: 'BUILD_FAILED';
  constructor(message: string, options?: WarrenErrorOptions) {
    super('BUILD_FAILED', message, options);
  }
}

/** The class of each code: a code without one does not compile, and a unit test checks them all. */
export const ERROR_CLASSES: { readonly [C in WarrenErrorCode]: new (message: string, options?: WarrenErrorOptions) => WarrenError & { code: C } } = {
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
  SNAPSHOT_NOT_FOUND: SnapshotNotFoundError,
  VOLUME_NOT_FOUND: VolumeNotFoundError,
  KEY_NOT_FOUND: KeyNotFoundError,
  SANDBOX_NOT_READY: SandboxNotReadyError,
  UPSTREAM_UNAVAILABLE: UpstreamUnavailableError,
  PTY_UNAVAILABLE: PtyUnavailableError,
  NOT_SUPPORTED: NotSupportedError,
  PORT_UNREACHABLE: PortUnreachableError,
  KERNEL_DIED: KernelDiedError,
  INTERNAL: InternalError,
  METHOD_NOT_ALLOWED: MethodNotAllowedError,
  REQUEST_TIMEOUT: RequestTimeoutError,
  CONNECTION_CLOSED: ConnectionClosedError,
  IMAGE_NOT_ALLOWED: ImageNotAllowedError,
  IMAGE_PULL_FAILED: ImagePullFailedError,
  IMAGE_TOO_LARGE: ImageTooLargeError,
  BUILD_CONTEXT_TOO_LARGE: BuildContextTooLargeError,
  BUILD_FAILED: BuildFailedError,
};

/** Builds the SDK error for a code, as its own subclass. */
export function makeError(code: WarrenErrorCode, message: string, options?: WarrenErrorOptions): WarrenError {
  const cls = (ERROR_CLASSES as Record<string, (typeof ERROR_CLASSES)[WarrenErrorCode] | undefined>)[code] ?? InternalError;
  return new cls(message, options);
}

/** Turns a wire error body into its SDK error class. */
export function errorFromWire(body: WireErrorBody): WarrenError {
  return makeError(body.code, body.message, { details: body.details });
}
