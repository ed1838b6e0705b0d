/**
 * The closed list of error codes that cross the wire, each with the HTTP status the controller
 * answers with and a suggestion a model or a person can act on. SDK-local conditions (a request
 * timing out, the connection closing) are not here: they never cross the wire.
 */
export const ERROR_CODES = {
  INVALID_FRAME: { status: 400, suggestion: 'Send a binary frame: a 4-byte big-endian header length, a JSON header, then the payload bytes.' },
  FRAME_TOO_LARGE: {
    status: 413,
    suggestion: 'Send or ask for less per call: split the content or use a streaming upload; read a range; ask for a smaller limit, or page with the cursor.',
  },
  UNKNOWN_METHOD: { status: 404, suggestion: 'Call one of the methods in the protocol registry; upgrade the SDK if the method is new.' },
  METHOD_NOT_ALLOWED: { status: 405, suggestion: 'Use the HTTP method the message names for this route.' },
  INVALID_PARAMS: { status: 400, suggestion: 'Fix the parameters named in the details and call again.' },
  PROTOCOL_VERSION_MISMATCH: { status: 426, suggestion: 'Use an SDK whose protocol version matches the server.' },
  HANDSHAKE_REQUIRED: { status: 400, suggestion: 'Send a hello frame before any request.' },
  DUPLICATE_REQUEST_ID: { status: 409, suggestion: 'Use a request id that is not already in flight on this connection.' },
  UNAUTHORIZED: { status: 401, suggestion: 'Pass a valid API key (Authorization: Bearer <key>) or sandbox token.' },
  FORBIDDEN: { status: 403, suggestion: 'This credential may not do that; use a credential with the needed rights.' },
  NOT_FOUND: { status: 404, suggestion: 'Check the path; list the parent folder to see what exists.' },
  IS_A_DIRECTORY: { status: 400, suggestion: 'Name a file, not a folder; list the folder to see its files.' },
  NOT_A_DIRECTORY: { status: 400, suggestion: 'Name a folder, not a file.' },
  ALREADY_EXISTS: { status: 409, suggestion: 'Choose another name, or pass overwrite: true.' },
  PATH_NOT_IN_SANDBOX: { status: 403, suggestion: 'Use a path inside the sandbox roots named in the message.' },
  PATH_NOT_WRITABLE: { status: 403, suggestion: 'Write only below the writable roots named in the message.' },
  PERMISSION_ESCALATION: { status: 403, suggestion: 'A derived handle can only narrow its parent: ask for a subset of its paths and rights.' },
  SUFFIX_NOT_ALLOWED: { status: 403, suggestion: 'Use a file whose suffix is in the allowed list named in the message.' },
  FILE_TOO_LARGE: { status: 413, suggestion: 'Read a range of the file, or write less than the size limit named in the message.' },
  EDIT_NOT_FOUND: { status: 422, suggestion: 'Read the file again and copy the exact text to replace, whitespace included.' },
  EDIT_NOT_UNIQUE: { status: 422, suggestion: 'Include more surrounding lines in the text to replace so it occurs once.' },
  STALE_ANCHOR: { status: 409, suggestion: 'Read the file again for fresh LINE#ID anchors, then retry the edit.' },
  CONFLICT: { status: 409, suggestion: 'The file changed since you read it: read it again and retry.' },
  UNSUPPORTED_FILE_TYPE: { status: 415, suggestion: 'File calls read and write regular files and folders only; FIFOs, sockets and devices are refused.' },
  SYMLINK_LOOP: { status: 400, suggestion: 'The path goes through too many symbolic links (a loop); name the real file instead.' },
  DIRECTORY_NOT_EMPTY: { status: 409, suggestion: 'The folder is not empty: pass recursive: true to delete it with its contents.' },
  APPROVAL_DENIED: { status: 403, suggestion: 'The operation needs approval and was denied; ask the operator or choose another path.' },
  CANCELLED: { status: 499, suggestion: 'The call was cancelled; call again if it is still wanted.' },
  RESOURCE_EXHAUSTED: { status: 429, suggestion: 'A limit was reached; wait for running work to finish or raise the limit.' },
  SANDBOX_NOT_FOUND: { status: 404, suggestion: 'The sandbox does not exist or has ended; create a new one.' },
  SNAPSHOT_NOT_FOUND: {
    status: 404,
    suggestion: 'The snapshot does not exist, was deleted, or belongs to another tenant; list yours with GET /v1/snapshots (warren snapshot ls).',
  },
  VOLUME_NOT_FOUND: {
    status: 404,
    suggestion: 'The volume does not exist or belongs to another tenant; create it with POST /v1/volumes (warren volume create NAME) or list yours.',
  },
  KEY_NOT_FOUND: { status: 404, suggestion: 'No API key has that id; list them with GET /v1/keys (warren keys ls).' },
  SANDBOX_NOT_READY: { status: 503, suggestion: 'The sandbox is starting or its daemon is not answering; retry shortly.' },
  UPSTREAM_UNAVAILABLE: { status: 502, suggestion: 'The Docker engine or the sandbox daemon did not answer; check that Docker is running.' },
  PTY_UNAVAILABLE: {
    status: 501,
    suggestion: 'This sandbox cannot open a terminal (the message says why); run commands with commands.run or commands.start instead.',
  },
  NOT_SUPPORTED: {
    status: 501,
    suggestion:
      'This backend cannot do that (the message says which and why, and what it can do instead); GET /readyz names the engine or cluster (docs/install.md, docs/kubernetes.md).',
  },
  PORT_UNREACHABLE: {
    status: 502,
    suggestion: 'Nothing listens on that port inside the sandbox: start the server first, listening on 127.0.0.1 (or 0.0.0.0), then retry.',
  },
  IMAGE_NOT_ALLOWED: {
    status: 403,
    suggestion: "Use an image already on the engine or one from a registry in the controller's allowedRegistries (GET /readyz lists them).",
  },
  IMAGE_PULL_FAILED: {
    status: 502,
    suggestion: 'Check the image name and tag, that the registry answers, and that the image is public or the engine is logged in.',
  },
  IMAGE_TOO_LARGE: { status: 507, suggestion: 'Use a smaller image, or ask the operator to raise images.maxPullMb or free disk space on the engine.' },
  BUILD_CONTEXT_TOO_LARGE: {
    status: 413,
    suggestion: 'Build from a smaller folder: leave out build output and dependencies, or ask the operator to raise images.maxBuildContextMb.',
  },
  BUILD_FAILED: { status: 422, suggestion: 'Read the build output in the message, fix the Dockerfile or the context, and build again.' },
  KERNEL_DIED: {
    status: 409,
    suggestion:
      "The code context's kernel died (it crashed, ran out of memory or was killed) and its state is gone: call code.restartContext (sandbox.code.restartContext) and run the setup cells again.",
  },
  INTERNAL: { status: 500, suggestion: 'An unexpected error; the message says what failed. Report it if it repeats.' },
} as const satisfies Record<string, { status: number; suggestion: string }>;

/** One of the wire error codes. */
export type ErrorCode = keyof typeof ERROR_CODES;

/** Every wire error code, for exhaustive checks and schema enums. */
export const ERROR_CODE_LIST = Object.keys(ERROR_CODES) as [ErrorCode, ...ErrorCode[]];

/** The error body as it crosses the wire. */
export interface WireErrorBody {
  code: ErrorCode;
  message: string;
  details?: Record<string, unknown> | undefined;
}

/**
 * An error that carries a wire code. The agent and controller throw it; the dispatcher turns it
 * into an error frame or an HTTP answer with the code's status.
 *
 * @example
 * throw new CodedError('NOT_FOUND', "No file at '/workspace/a.py'", { path: '/workspace/a.py' });
 */
export class CodedError extends Error {
  override readonly name = 'CodedError';
  constructor(
    readonly code: ErrorCode,
    message: string,
    readonly details?: Record<string, unknown>,
  ) {
    super(message);
  }

  /** The HTTP status for this code. */
  get status(): number {
    return ERROR_CODES[this.code].status;
  }

  toWire(): WireErrorBody {
    return this.details === undefined ? { code: this.code, message: this.message } : { code: this.code, message: this.message, details: this.details };
  }
}

/** Turns anything thrown into a wire error body, hiding nothing but the stack. */
export function toWireError(err: unknown): WireErrorBody {
  if (err instanceof CodedError) return err.toWire();
  const message = err instanceof Error ? err.message : String(err);
  return { code: 'INTERNAL', message };
}
