"""A connection that comes back by itself, as the TypeScript SDK's ``ReconnectingChannel``.

When the socket drops (a controller restart, a network blip), it reopens with exponential backoff
and full jitter, so a fleet of clients does not reconnect in lockstep. Calls made meanwhile wait for
the new connection within their own timeout. A call that was in flight is sent again only when its
method is idempotent and it is not a stream, at most :data:`MAX_REPEATS` times; any other fails with
a retryable :class:`ConnectionClosedError` that says it may or may not have run.
"""

from __future__ import annotations

import asyncio
import random
import time
from dataclasses import dataclass
from typing import Any, Awaitable, Callable, Mapping, Optional, Tuple

from ._protocol import METHODS
from .connection import DEFAULT_CALL_TIMEOUT, ApprovalHandler, Connection, EventHandler, ProtocolInfo
from .errors import ConnectionClosedError, RequestTimeoutError, WarrenError

#: How many times one idempotent call is sent again after its connection dropped: a call whose
#: connection drops every time may be what drops it, and repeating it without end is a crash loop.
MAX_REPEATS = 2


@dataclass
class ReconnectOptions:
    """How a dropped connection is brought back, in seconds."""

    #: The first retry waits up to this long; each later one up to twice the one before.
    base_delay: float = 0.1
    #: No single wait is longer than this.
    max_delay: float = 5.0
    #: After this long without a connection, calls fail instead of waiting.
    give_up_after: float = 120.0


class Channel:
    """One sandbox's calls over whichever connection is current; see the module's description."""

    def __init__(self, open: Callable[[], Awaitable[Connection]], first: Connection, options: Optional[ReconnectOptions] = None) -> None:
        self._open = open
        self._options = options or ReconnectOptions()
        self._current = first
        self._reconnecting: "Optional[asyncio.Task[Connection]]" = None
        self._failure: Optional[WarrenError] = None
        self._closed = False
        self._approval: Optional[ApprovalHandler] = None
        #: How many times this channel has reconnected.
        self.reconnects = 0

    @property
    def protocol(self) -> ProtocolInfo:
        return self._current.protocol

    @property
    def is_open(self) -> bool:
        return not self._closed and self._failure is None

    @property
    def on_approval(self) -> Optional[ApprovalHandler]:
        return self._approval

    @on_approval.setter
    def on_approval(self, handler: Optional[ApprovalHandler]) -> None:
        self._approval = handler
        self._current.on_approval = handler

    async def call(
        self,
        method: str,
        params: Mapping[str, Any],
        *,
        payload: Optional[bytes] = None,
        on_event: Optional[EventHandler] = None,
        timeout: Optional[float] = None,
    ) -> Tuple[Any, Optional[bytes]]:
        """As :meth:`Connection.call`, over the current connection, waiting for a new one when it dropped."""
        deadline = time.monotonic() + (DEFAULT_CALL_TIMEOUT if timeout is None else timeout)
        spec = METHODS.get(method)
        repeatable = spec is not None and spec.idempotent and on_event is None
        repeats = 0
        while True:
            connection = await self._ready(deadline, method)
            try:
                return await connection.call(method, params, payload=payload, on_event=on_event, timeout=max(0.001, deadline - time.monotonic()))
            except ConnectionClosedError as err:
                if self._closed:
                    raise
                if not repeatable:
                    raise ConnectionClosedError(
                        f"The connection dropped while {method} was in flight; it may or may not have run, so it was not repeated. "
                        "The connection is coming back by itself: call again if repeating it is safe."
                    ) from err
                if repeats >= MAX_REPEATS:
                    raise ConnectionClosedError(
                        f"The connection dropped each of the {repeats + 1} times {method} was sent, so it is not sent again: "
                        "the call itself may be what ends the connection. Check the sandbox, then call again if it is safe."
                    ) from err
                repeats += 1

    def pause_reading(self) -> None:
        self._current.pause_reading()

    def resume_reading(self) -> None:
        self._current.resume_reading()

    async def sleep(self) -> None:
        """Closes the current connection without closing the channel: the next call opens a new one
        (a hibernated sandbox, which that call wakes)."""
        await self._current.close()

    async def close(self) -> None:
        """Closes for good: no reconnection; pending and later calls fail."""
        self._closed = True
        if self._reconnecting is not None:
            self._reconnecting.cancel()
        await self._current.close()

    async def _ready(self, deadline: float, method: str) -> Connection:
        if self._closed:
            raise ConnectionClosedError("This sandbox handle was closed; connect again with Sandbox.connect(id).")
        if self._current.is_open:
            return self._current
        if self._failure is not None:
            raise self._failure
        if self._reconnecting is None:
            self._reconnecting = asyncio.get_running_loop().create_task(self._reconnect())
        try:
            return await asyncio.wait_for(asyncio.shield(self._reconnecting), max(0.0, deadline - time.monotonic()))
        except asyncio.TimeoutError:
            raise RequestTimeoutError(f"{method} timed out waiting for the connection to come back.") from None

    async def _reconnect(self) -> Connection:
        started = time.monotonic()
        last: Optional[BaseException] = None
        attempt = 0
        try:
            while not self._closed and time.monotonic() - started < self._options.give_up_after:
                cap = min(self._options.max_delay, self._options.base_delay * 2**attempt)
                attempt += 1
                await asyncio.sleep(random.random() * cap)  # full jitter
                try:
                    connection = await self._open()
                except WarrenError as err:
                    last = err
                    if not err.is_retryable:
                        break  # a credential or a sandbox that is gone does not come back by waiting
                    continue
                if self._closed:
                    await connection.close()
                    break
                connection.on_approval = self._approval
                self._current = connection
                self.reconnects += 1
                return connection
            if isinstance(last, WarrenError) and not last.is_retryable:
                self._failure = last
            else:
                self._failure = ConnectionClosedError(f"Could not reconnect to the sandbox: {last or 'closed'}.")
            raise self._failure
        finally:
            self._reconnecting = None
