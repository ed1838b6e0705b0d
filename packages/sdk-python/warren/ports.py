"""``sandbox.ports``: servers listening inside the sandbox, reached through Warren; the twin of the
TypeScript SDK's ``sandbox.ports``."""

from __future__ import annotations

import asyncio
import urllib.parse
from typing import Any, AsyncIterator, Callable, Dict, List, Optional

from ._pydantic import BaseModel
from ._stream import EventStream
from .connection import Caller
from .errors import PortUnreachableError
from .rest import RestClient


def _cancel(task: "Optional[asyncio.Task[Any]]") -> None:
    if task is not None:
        task.cancel()


__all__ = ["PortConnection", "Ports"]

#: How long a raw port connection may stay open, in seconds: a day.
PORT_MAX_SECONDS = 24 * 60 * 60.0


class PortConnection:
    """A TCP connection to a port inside the sandbox: :meth:`write` sends to the server, :meth:`read`
    (or ``async for``) gives what it answers, ``b""`` once it closed its side. It travels over the
    sandbox's WebSocket, so it works with ``network: none``. :meth:`end` half-closes, :meth:`close`
    closes; ``async with`` closes at the end of the block. A slow reader slows the server (backpressure).
    """

    def __init__(self, connection: Caller, handle: str, incoming: "EventStream[bytes]", call: "asyncio.Task[Any]") -> None:
        self._connection = connection
        self._handle = handle
        self._incoming = incoming
        self._call = call

    async def write(self, data: bytes) -> None:
        """Sends ``data`` to the server; returns once the sandbox has taken it."""
        await self._connection.call("port.write", {"handle": self._handle}, payload=bytes(data))

    async def end(self) -> None:
        """Half-closes: the server reads end-of-file, and can still answer."""
        await self._connection.call("port.write", {"handle": self._handle, "end": True})

    async def read(self) -> bytes:
        """The next chunk the server sent; ``b""`` when it closed its side (or the connection ended)."""
        try:
            return await self._incoming.__anext__()
        except StopAsyncIteration:
            return b""

    def __aiter__(self) -> AsyncIterator[bytes]:
        return self._incoming

    async def close(self) -> None:
        """Closes the connection (the sandbox closes its socket to the server)."""
        await self._incoming.aclose()
        self._call.cancel()
        try:
            await self._call
        except BaseException:  # noqa: BLE001 - closing: how the call ended no longer matters
            pass

    async def __aenter__(self) -> "PortConnection":
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.close()


class Ports:
    """``sandbox.ports``: browser URLs and raw connections for servers listening inside the sandbox.

    Example::

        url = await sandbox.ports.url(3000, ttl_seconds=600)
        async with await sandbox.ports.connect(6379) as redis:
            await redis.write(b"PING\\r\\n")
            print(await redis.read())
    """

    def __init__(self, connection: Callable[[], Caller], rest: RestClient, sandbox_id: str) -> None:
        self._connection = connection
        self._rest = rest
        self._id = sandbox_id

    async def url(self, port: int, *, ttl_seconds: Optional[int] = None) -> str:
        """A signed URL that opens ``port`` in a browser until it expires (an hour by default),
        scoped to this sandbox and port; anyone with the URL reaches the port until then. Where the
        operator set a wildcard ``portDomain`` the URL is on the port's own origin.

        Example::

            url = await sandbox.ports.url(3000, ttl_seconds=600)
        """
        body: Dict[str, Any] = {"port": port}
        if ttl_seconds is not None:
            body["ttlSeconds"] = ttl_seconds
        answer = await self._rest.port_url(self._id, body)
        return answer.url or urllib.parse.urljoin(self._rest.base_url + "/", answer.path.lstrip("/"))

    async def set_public(self, port: int, public: bool) -> List[int]:
        """Opens ``port`` to anyone who has its address, with no credential (True), or closes it
        again (False); answers the sandbox's public ports. Needs the API key or the sandbox token.

        Example::

            await sandbox.ports.set_public(3000, True)  # sandbox.ports.base_url(3000) now works from any browser
        """
        return list((await self._rest.set_port_public(self._id, {"port": port, "public": public})).public_ports)

    def base_url(self, port: int) -> str:
        """The URL of ``port`` for a client that sends this sandbox's credential itself
        (``Authorization: Bearer <token>``): no signature, nothing to expire."""
        return f"{self._rest.base_url}/v1/sandboxes/{urllib.parse.quote(self._id, safe='')}/ports/{int(port)}/"

    async def connect(self, port: int, *, connect_timeout: Optional[float] = None) -> PortConnection:
        """Opens a raw TCP connection to ``port`` on the sandbox's loopback (databases and other
        servers that do not speak HTTP). ``PortUnreachableError`` when nothing listens there.

        Example::

            redis = await sandbox.ports.connect(6379)
            await redis.write(b"PING\\r\\n")
        """
        connection = self._connection()
        params: Dict[str, Any] = {"port": port}
        if connect_timeout is not None:
            params["connectTimeoutMs"] = max(100, int(connect_timeout * 1000))
        call: "Optional[asyncio.Task[Any]]" = None
        incoming: "EventStream[bytes]" = EventStream(connection, lambda: _cancel(call))
        connected: "asyncio.Future[str]" = asyncio.get_running_loop().create_future()

        def on_event(name: str, data: BaseModel, payload: Optional[bytes]) -> None:
            if name == "connected" and not connected.done():
                connected.set_result(data.handle)  # type: ignore[attr-defined]
            elif name == "data" and payload:
                incoming.push(payload, len(payload))

        async def run() -> None:
            try:
                await connection.call("port.open", params, on_event=on_event, timeout=PORT_MAX_SECONDS)
            except asyncio.CancelledError:
                incoming.end()
                raise
            except BaseException as err:  # noqa: BLE001 - handed to the reader, or to connect()
                if not connected.done():
                    connected.set_exception(err)
                incoming.fail(err)
                return
            if not connected.done():
                connected.set_exception(PortUnreachableError(f"The connection to port {port} closed at once."))
            incoming.end()

        call = asyncio.get_running_loop().create_task(run())
        try:
            handle = await connected
        except BaseException:
            call.cancel()
            raise
        return PortConnection(connection, handle, incoming, call)
