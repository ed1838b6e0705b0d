"""One WebSocket to a sandbox through the controller: the hello/welcome handshake, then calls matched
to their answers by id in one pending map, each with its own timeout, all failed when it closes.

Everything received is checked as the TypeScript SDK checks it: frames over the caps or not matching
the frame header schema fail the call they name (or are dropped when they name none), answers to
unknown ids are ignored, results and events are read against the registry's schemas.
"""

from __future__ import annotations

import asyncio
import inspect
from dataclasses import dataclass, field
from typing import Any, Awaitable, Callable, Dict, Mapping, Optional, Protocol, Set, Tuple, Union
from urllib.parse import urlparse

from ._pydantic import BaseModel, ValidationError, issues, validate
from ._protocol import COMMON_EVENTS, METHODS, PROTOCOL_MINOR, PROTOCOL_VERSION, WS_MAX_PAYLOAD_BYTES, ApprovalEvent
from .errors import (
    ConnectionClosedError,
    InternalError,
    InvalidFrameError,
    InvalidParamsError,
    ProtocolVersionMismatchError,
    RequestTimeoutError,
    UnknownMethodError,
    WarrenError,
    error_from_wire,
    make_error,
)
from .frame import decode_frame, encode_frame
from ._ws import ConnectionClosed, InvalidHandshake, close_reason, handshake_status
from ._ws import connect as ws_connect

#: How long a call waits for its answer when it names no timeout, in seconds.
DEFAULT_CALL_TIMEOUT = 60.0

#: Receives a checked event of a call: its name, its data (a model of the registry) and its payload bytes.
EventHandler = Callable[[str, BaseModel, Optional[bytes]], None]
#: Decides one approval request (seed 001): return True to allow.
ApprovalHandler = Callable[[ApprovalEvent, str], Union[bool, Awaitable[bool]]]


class Caller(Protocol):
    """What the namespaces (files, commands, pty) call through: a :class:`Connection`, or the
    reconnecting :class:`~warren.channel.Channel` a Sandbox holds."""

    async def call(
        self,
        method: str,
        params: Mapping[str, Any],
        *,
        payload: Optional[bytes] = None,
        on_event: Optional[EventHandler] = None,
        timeout: Optional[float] = None,
    ) -> Tuple[Any, Optional[bytes]]: ...

    def pause_reading(self) -> None: ...

    def resume_reading(self) -> None: ...


@dataclass
class ProtocolInfo:
    """What a connection speaks: the shared major, the minor both ends speak (the lower), the server's."""

    version: int
    minor: int
    server_minor: int
    server: str
    server_version: str


@dataclass
class _Pending:
    method: str
    future: "asyncio.Future[Tuple[Any, Optional[bytes]]]"
    on_event: Optional[EventHandler] = None
    streamed: Set[str] = field(default_factory=set)


def _status_error(status: int, url: str) -> WarrenError:
    code = {401: "UNAUTHORIZED", 403: "FORBIDDEN", 404: "SANDBOX_NOT_FOUND", 503: "SANDBOX_NOT_READY"}.get(status, "UPSTREAM_UNAVAILABLE")
    return make_error(code, f"The controller refused the connection to {url} with HTTP {status}.")


def check_params(method: str, params: Mapping[str, Any]) -> None:
    """Checks a call's params against the registry before anything is sent (strict, no coercion)."""
    spec = METHODS.get(method)
    if spec is None:
        raise UnknownMethodError(f"{method} is not a method of protocol {PROTOCOL_VERSION}.{PROTOCOL_MINOR}.")
    try:
        validate(spec.params, params)
    except ValidationError as err:
        raise InvalidParamsError(f"Invalid arguments for {method}: {issues(err)}") from None


class Connection:
    """One open WebSocket to a sandbox; use :meth:`open`."""

    def __init__(self, ws: Any, protocol: ProtocolInfo) -> None:
        self._ws = ws
        self.protocol = protocol
        self._next_id = 1
        self._pending: Dict[int, _Pending] = {}
        self._closed: Optional[WarrenError] = None
        self._background: Set["asyncio.Task[Any]"] = set()
        self._readable = asyncio.Event()
        self._readable.set()
        self._pauses = 0
        #: Answers the sandbox's approval requests; None (or a handler that raises) denies.
        self.on_approval: Optional[ApprovalHandler] = None
        self._reader = asyncio.get_running_loop().create_task(self._read())

    @classmethod
    async def open(cls, url: str, token: str, timeout: float = 10.0, client: str = "warren-python") -> "Connection":
        """Opens a connection and completes the version handshake."""
        parsed = urlparse(url)
        try:
            ws = await ws_connect(url, headers={"authorization": f"Bearer {token}"}, max_size=WS_MAX_PAYLOAD_BYTES, open_timeout=timeout, max_queue=16)
        except InvalidHandshake as err:
            status = handshake_status(err)
            if status is not None:
                raise _status_error(status, url) from err
            raise ConnectionClosedError(f"Could not connect to {parsed.scheme}://{parsed.netloc}: {err}") from err
        except (OSError, asyncio.TimeoutError) as err:
            raise ConnectionClosedError(f"Could not connect to {parsed.scheme}://{parsed.netloc}: {err}") from err
        try:
            await ws.send(encode_frame({"type": "hello", "protocolVersion": PROTOCOL_VERSION, "protocolMinor": PROTOCOL_MINOR, "client": client}))
            try:
                data = await asyncio.wait_for(ws.recv(), timeout)
            except asyncio.TimeoutError:
                raise RequestTimeoutError(f"No handshake answer from {url} within {timeout} s.") from None
            except ConnectionClosed as err:
                raise ConnectionClosedError(f"The connection closed during the handshake ({close_reason(err)}).") from err
            header = decode_frame(data).header
            if header["type"] == "err":
                raise error_from_wire(header["error"])
            if header["type"] != "welcome":
                raise InvalidFrameError(f"Expected a welcome frame, got '{header['type']}'.")
            if header["protocolVersion"] != PROTOCOL_VERSION:
                server = f"{header['protocolVersion']}.{header.get('protocolMinor', 0)}"
                raise ProtocolVersionMismatchError(
                    f"The sandbox's daemon speaks protocol {server}; this SDK speaks {PROTOCOL_VERSION}.{PROTOCOL_MINOR}. "
                    f"Use an SDK of major version {header['protocolVersion']}.",
                    details={"server": server, "client": f"{PROTOCOL_VERSION}.{PROTOCOL_MINOR}"},
                )
        except BaseException:
            await ws.close()
            raise
        server_minor = int(header.get("protocolMinor") or 0)
        info = ProtocolInfo(PROTOCOL_VERSION, min(PROTOCOL_MINOR, server_minor), server_minor, header["server"], header["serverVersion"])
        return cls(ws, info)

    @property
    def is_open(self) -> bool:
        return self._closed is None

    async def call(
        self,
        method: str,
        params: Mapping[str, Any],
        *,
        payload: Optional[bytes] = None,
        on_event: Optional[EventHandler] = None,
        timeout: Optional[float] = None,
    ) -> Tuple[Any, Optional[bytes]]:
        """Calls a method; returns its result (a model of the registry) and the response payload.

        The params are checked before anything is sent, the result when it arrives. Cancelling the
        awaiting task sends the protocol's ``cancel`` frame and lets ``asyncio.CancelledError``
        through; a timeout cancels the same way and raises :class:`RequestTimeoutError`.
        """
        check_params(method, params)
        if self._closed is not None:
            raise self._closed
        ident = self._next_id
        self._next_id += 1
        future: "asyncio.Future[Tuple[Any, Optional[bytes]]]" = asyncio.get_running_loop().create_future()
        self._pending[ident] = _Pending(method, future, on_event)
        limit = DEFAULT_CALL_TIMEOUT if timeout is None else timeout
        try:
            await self._ws.send(encode_frame({"type": "req", "id": ident, "method": method, "params": dict(params)}, payload))
        except WarrenError:
            self._pending.pop(ident, None)
            raise
        except ConnectionClosed:
            pass  # the reader fails the call with the close's reason
        try:
            result, body = await asyncio.wait_for(asyncio.shield(future), limit)
        except asyncio.TimeoutError:
            self._give_up(ident)
            raise RequestTimeoutError(f"{method} did not answer within {limit} s; it was cancelled.") from None
        except asyncio.CancelledError:
            self._give_up(ident)
            raise
        spec = METHODS[method]
        try:
            return validate(spec.result, result), body
        except ValidationError as err:
            raise InternalError(f"The server answered {method} off-contract: {issues(err)}") from None

    def pause_reading(self) -> None:
        """Stops reading the socket until :meth:`resume_reading` is called as often (backpressure)."""
        self._pauses += 1
        self._readable.clear()

    def resume_reading(self) -> None:
        if self._pauses > 0:
            self._pauses -= 1
            if self._pauses == 0:
                self._readable.set()

    async def close(self) -> None:
        """Closes the connection; pending calls fail with :class:`ConnectionClosedError`."""
        self._fail_all(ConnectionClosedError("The connection was closed by this client."))
        self._readable.set()
        await self._ws.close()
        self._reader.cancel()
        try:
            await self._reader
        except (asyncio.CancelledError, Exception):
            pass

    def _give_up(self, ident: int) -> None:
        """Forgets a call this side stopped waiting for, and tells the server to stop its work."""
        if self._pending.pop(ident, None) is not None:
            self._spawn(self._send_quietly({"type": "cancel", "id": ident}))

    def _spawn(self, coro: Awaitable[Any]) -> None:
        task = asyncio.ensure_future(coro)
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    async def _send_quietly(self, header: Dict[str, Any]) -> None:
        try:
            await self._ws.send(encode_frame(header))
        except (ConnectionClosed, WarrenError):
            pass

    async def _read(self) -> None:
        reason = "closed"
        try:
            while True:
                await self._readable.wait()
                data = await self._ws.recv()
                self._on_message(data)
        except ConnectionClosed as err:
            sent = getattr(err, "sent", None)
            if sent is not None and sent.code == 1009:
                reason = f"1009: the server sent a message over the {WS_MAX_PAYLOAD_BYTES}-byte cap"
            else:
                reason = close_reason(err)
        except asyncio.CancelledError:
            pass
        finally:
            self._fail_all(ConnectionClosedError(f"The connection to the sandbox closed ({reason})."))

    def _on_message(self, data: Union[bytes, str]) -> None:
        try:
            frame = decode_frame(data)
        except WarrenError as err:
            # A frame that cannot be read fails the call it names, if it names one; otherwise there
            # is no call to tell, and the calls keep their own timeouts.
            ident = (err.details or {}).get("id")
            pending = self._pending.pop(ident, None) if isinstance(ident, int) else None
            if pending is not None and not pending.future.done():
                pending.future.set_exception(err)
            return
        header = frame.header
        kind = header["type"]
        ident = header.get("id")
        if kind not in ("res", "err", "evt") or not isinstance(ident, int) or isinstance(ident, bool):
            return
        pending = self._pending.get(ident)
        if pending is None:
            return  # an answer to a call this side no longer waits for, or never made
        if kind == "evt":
            self._on_event(ident, pending, header["event"], header["data"], frame.payload)
            return
        del self._pending[ident]
        if pending.future.done():
            return
        if kind == "res":
            pending.future.set_result((header["result"], frame.payload))
        else:
            pending.future.set_exception(error_from_wire(header["error"]))

    def _on_event(self, ident: int, pending: _Pending, event: str, data: Any, payload: Optional[bytes]) -> None:
        events = {**COMMON_EVENTS, **METHODS[pending.method].events}
        schema = events.get(event)
        if schema is None:
            return  # a newer server may stream more; this client ignores what it does not know
        try:
            checked = validate(schema, data)
        except ValidationError as err:
            del self._pending[ident]
            self._spawn(self._send_quietly({"type": "cancel", "id": ident}))
            if not pending.future.done():
                pending.future.set_exception(InternalError(f"The server sent {pending.method}'s '{event}' event off-contract: {issues(err)}"))
            return
        if event == "approval":
            self._spawn(self._answer_approval(ident, pending.method, checked))  # type: ignore[arg-type]
        elif pending.on_event is not None:
            pending.on_event(event, checked, payload)

    async def _answer_approval(self, ident: int, method: str, request: ApprovalEvent) -> None:
        allow = False
        handler = self.on_approval
        if handler is not None:
            try:
                answer = handler(request, method)
                allow = (await answer if inspect.isawaitable(answer) else answer) is True
            except Exception:
                allow = False
        await self._send_quietly({"type": "approval", "id": ident, "allow": allow})

    def _fail_all(self, err: WarrenError) -> None:
        if self._closed is None:
            self._closed = err
        for pending in self._pending.values():
            if not pending.future.done():
                pending.future.set_exception(err)
        self._pending.clear()
