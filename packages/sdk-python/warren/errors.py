"""Warren's errors: one base class, one family per kind, one class per wire code.

The codes, their HTTP status and their suggestions come from the protocol registry
(``ERROR_CODES`` in the generated ``_protocol`` module); the class names are the TypeScript SDK's.
A code this SDK does not know (a newer server's) becomes a plain :class:`WarrenError` that keeps
the code, so nothing the server said is lost.

Example::

    try:
        await sandbox.files.read("missing.txt")
    except NotFoundError as err:
        print(err.code, err.suggestion)
"""

from __future__ import annotations

from typing import Any, Dict, Mapping, Optional, Type

from ._protocol import ERROR_CODES

#: Conditions the SDK detects itself; they never cross the wire.
LOCAL_ERROR_CODES: Dict[str, str] = {
    "REQUEST_TIMEOUT": "The call took longer than its timeout; pass a larger timeout or do less per call.",
    "CONNECTION_CLOSED": "The connection to the sandbox closed; reconnect with Sandbox.connect(id) and call again.",
}

_RETRYABLE = frozenset({"SANDBOX_NOT_READY", "UPSTREAM_UNAVAILABLE", "RESOURCE_EXHAUSTED", "REQUEST_TIMEOUT", "CONNECTION_CLOSED"})


class WarrenError(Exception):
    """The base of every error the SDK raises.

    ``code`` is stable and machine-readable, ``message`` says what failed, ``suggestion`` what to
    do next; both are written to be read by a model. ``details`` carries the server's structured
    facts (the path, the limit, the stale anchors).
    """

    code: str

    def __init__(self, message: str, *, code: Optional[str] = None, details: Optional[Mapping[str, Any]] = None) -> None:
        super().__init__(message)
        if code is not None:
            self.code = code
        elif not hasattr(type(self), "code"):
            self.code = "INTERNAL"
        self.message = message
        self.details: Optional[Dict[str, Any]] = dict(details) if details is not None else None

    @property
    def suggestion(self) -> str:
        if self.code in LOCAL_ERROR_CODES:
            return LOCAL_ERROR_CODES[self.code]
        known = ERROR_CODES.get(self.code)
        return known[1] if known else "The server sent an error code this SDK does not know; upgrade the SDK, and read the message."

    @property
    def status(self) -> Optional[int]:
        """The HTTP status the controller gives this code (None for SDK-local codes)."""
        known = ERROR_CODES.get(self.code)
        return known[0] if known else None

    @property
    def is_retryable(self) -> bool:
        """True when the same call may succeed if made again later."""
        return self.code in _RETRYABLE

    def to_json(self) -> Dict[str, Any]:
        return {
            "name": type(self).__name__,
            "code": self.code,
            "message": self.message,
            "suggestion": self.suggestion,
            "details": self.details,
            "isRetryable": self.is_retryable,
        }

    def __repr__(self) -> str:
        return f"{type(self).__name__}(code={self.code!r}, message={self.message!r})"


# Families: catch every error of one kind at once.
class WarrenNotFoundError(WarrenError):
    """Things that do not exist: a path, a sandbox, the text an edit looks for, a method."""


class WarrenForbiddenError(WarrenError):
    """The credential or the policy does not allow it."""


class WarrenConflictError(WarrenError):
    """The state is not what the call expected: read again and retry."""


class WarrenTimeoutError(WarrenError):
    """The call took longer than it was given."""


class WarrenLimitError(WarrenError):
    """A size or count limit was reached."""


class WarrenInvalidInputError(WarrenError):
    """The call itself is wrong: its parameters, its target's kind, its frame."""


class WarrenConnectionError(WarrenError):
    """The sandbox or the controller could not be reached or is not ready; usually worth a retry."""


class InvalidFrameError(WarrenInvalidInputError):
    code = "INVALID_FRAME"


class FrameTooLargeError(WarrenLimitError):
    code = "FRAME_TOO_LARGE"


class UnknownMethodError(WarrenNotFoundError):
    code = "UNKNOWN_METHOD"


class InvalidParamsError(WarrenInvalidInputError):
    code = "INVALID_PARAMS"


class ProtocolVersionMismatchError(WarrenInvalidInputError):
    code = "PROTOCOL_VERSION_MISMATCH"


class HandshakeRequiredError(WarrenInvalidInputError):
    code = "HANDSHAKE_REQUIRED"


class DuplicateRequestIdError(WarrenConflictError):
    code = "DUPLICATE_REQUEST_ID"


class UnauthorizedError(WarrenForbiddenError):
    code = "UNAUTHORIZED"


class ForbiddenError(WarrenForbiddenError):
    code = "FORBIDDEN"


class NotFoundError(WarrenNotFoundError):
    code = "NOT_FOUND"


class IsADirectoryError(WarrenInvalidInputError):  # noqa: A001 - the TypeScript SDK's name for the code
    code = "IS_A_DIRECTORY"


class NotADirectoryError(WarrenInvalidInputError):  # noqa: A001
    code = "NOT_A_DIRECTORY"


class AlreadyExistsError(WarrenConflictError):
    code = "ALREADY_EXISTS"


class PathNotInSandboxError(WarrenForbiddenError):
    code = "PATH_NOT_IN_SANDBOX"


class PathNotWritableError(WarrenForbiddenError):
    code = "PATH_NOT_WRITABLE"


class PermissionEscalationError(WarrenForbiddenError):
    code = "PERMISSION_ESCALATION"


class SuffixNotAllowedError(WarrenForbiddenError):
    code = "SUFFIX_NOT_ALLOWED"


class FileTooLargeError(WarrenLimitError):
    code = "FILE_TOO_LARGE"


class EditNotFoundError(WarrenNotFoundError):
    code = "EDIT_NOT_FOUND"


class EditNotUniqueError(WarrenInvalidInputError):
    code = "EDIT_NOT_UNIQUE"


class StaleAnchorError(WarrenConflictError):
    code = "STALE_ANCHOR"


class ConflictError(WarrenConflictError):
    code = "CONFLICT"


class UnsupportedFileTypeError(WarrenInvalidInputError):
    code = "UNSUPPORTED_FILE_TYPE"


class SymlinkLoopError(WarrenInvalidInputError):
    code = "SYMLINK_LOOP"


class DirectoryNotEmptyError(WarrenConflictError):
    code = "DIRECTORY_NOT_EMPTY"


class ApprovalDeniedError(WarrenForbiddenError):
    code = "APPROVAL_DENIED"


class CancelledError(WarrenError):
    """The server cancelled the call. (A call this process cancels raises ``asyncio.CancelledError``.)"""

    code = "CANCELLED"


class ResourceExhaustedError(WarrenLimitError):
    code = "RESOURCE_EXHAUSTED"


class SandboxNotFoundError(WarrenNotFoundError):
    code = "SANDBOX_NOT_FOUND"


class SnapshotNotFoundError(WarrenNotFoundError):
    """A snapshot that does not exist, was deleted, or belongs to another tenant (not told apart)."""

    code = "SNAPSHOT_NOT_FOUND"


class VolumeNotFoundError(WarrenNotFoundError):
    """A volume that does not exist or belongs to another tenant (not told apart)."""

    code = "VOLUME_NOT_FOUND"


class KeyNotFoundError(WarrenNotFoundError):
    """No API key has that id (``/v1/keys``, admin keys only)."""

    code = "KEY_NOT_FOUND"


class SandboxNotReadyError(WarrenConnectionError):
    code = "SANDBOX_NOT_READY"


class UpstreamUnavailableError(WarrenConnectionError):
    code = "UPSTREAM_UNAVAILABLE"


class PtyUnavailableError(WarrenError):
    code = "PTY_UNAVAILABLE"


class InternalError(WarrenError):
    code = "INTERNAL"


class MethodNotAllowedError(WarrenInvalidInputError):
    code = "METHOD_NOT_ALLOWED"


class ImageNotAllowedError(WarrenForbiddenError):
    code = "IMAGE_NOT_ALLOWED"


class ImagePullFailedError(WarrenConnectionError):
    code = "IMAGE_PULL_FAILED"


class ImageTooLargeError(WarrenLimitError):
    code = "IMAGE_TOO_LARGE"


class BuildContextTooLargeError(WarrenLimitError):
    code = "BUILD_CONTEXT_TOO_LARGE"


class BuildFailedError(WarrenInvalidInputError):
    code = "BUILD_FAILED"


class NotSupportedError(WarrenError):
    code = "NOT_SUPPORTED"


class FrameworkNotInstalledError(NotSupportedError, ImportError):
    """An adapter's framework (the OpenAI Agents SDK, LangChain) is not installed: ``details["package"]``
    names what to install. Also an ``ImportError``, so ``except ImportError`` catches it."""


class PortUnreachableError(WarrenConnectionError):
    code = "PORT_UNREACHABLE"


class KernelDiedError(WarrenError):
    code = "KERNEL_DIED"


class RequestTimeoutError(WarrenTimeoutError):
    code = "REQUEST_TIMEOUT"


class ConnectionClosedError(WarrenConnectionError):
    code = "CONNECTION_CLOSED"


def _classes() -> Dict[str, Type[WarrenError]]:
    found: Dict[str, Type[WarrenError]] = {}
    pending = list(WarrenError.__subclasses__())
    while pending:
        cls = pending.pop()
        pending.extend(cls.__subclasses__())
        code = cls.__dict__.get("code")
        if isinstance(code, str):
            found[code] = cls
    return found


#: The class of each code (wire and SDK-local); tests/test_errors.py checks it covers the registry.
ERROR_CLASSES: Dict[str, Type[WarrenError]] = _classes()


def make_error(code: str, message: str, details: Optional[Mapping[str, Any]] = None) -> WarrenError:
    """The SDK error for a code, as its own class; an unknown code keeps its name on a plain WarrenError."""
    cls = ERROR_CLASSES.get(code)
    if cls is None:
        return WarrenError(message, code=code, details=details)
    return cls(message, details=details)


def error_from_wire(body: Any) -> WarrenError:
    """Turns a wire error body (``{code, message, details?}``) into its SDK error."""
    if not isinstance(body, dict) or not isinstance(body.get("code"), str) or not isinstance(body.get("message"), str):
        return InternalError(f"The server sent an error body that is not {{code, message}}: {str(body)[:200]}")
    details = body.get("details")
    return make_error(body["code"], body["message"], details if isinstance(details, dict) else None)
