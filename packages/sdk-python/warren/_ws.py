"""The one place the SDK imports websockets from, and the one place that knows its version.

websockets 13 brought a new asyncio client (``websockets.asyncio.client``), the default from 14 on;
the older one (``websockets.legacy``) is deprecated there. The SDK uses the new client where it
exists and the legacy one below 13 (Debian 12 ships 10.4), so it runs on websockets 10.4 to the
current release without a deprecation warning. The two differ in little the SDK touches: the name
of the header argument, and how a refused upgrade carries its HTTP status.
"""

from __future__ import annotations

from typing import Any, Callable, Mapping, Optional

import websockets
from websockets.exceptions import ConnectionClosed, InvalidHandshake

__all__ = ["ConnectionClosed", "InvalidHandshake", "close_reason", "connect", "handshake_status", "uses_new_client", "NEW_CLIENT"]


def uses_new_client(version: str) -> bool:
    """True when websockets ``version`` has the new asyncio client (13 and later)."""
    major = version.strip().split(".", 1)[0]
    return major.isdigit() and int(major) >= 13


#: Whether the new asyncio client is used (False: the legacy client of websockets 10 to 12).
NEW_CLIENT = uses_new_client(str(getattr(websockets, "__version__", "0")))

_connect: Callable[..., Any]
if NEW_CLIENT:
    from websockets.asyncio.client import connect as _connect  # type: ignore[import-not-found,no-redef,unused-ignore]
else:
    from websockets.legacy.client import connect as _connect  # type: ignore[no-redef,unused-ignore]


def connect(url: str, *, headers: Mapping[str, str], max_size: int, open_timeout: float, max_queue: int) -> Any:
    """Opens a client connection (await it): no compression, no keepalive pings (the controller's
    own liveness checks apply), at most ``max_queue`` messages read ahead of the SDK."""
    header_argument = "additional_headers" if NEW_CLIENT else "extra_headers"
    options = {header_argument: dict(headers), "max_size": max_size, "compression": None, "open_timeout": open_timeout, "ping_interval": None, "max_queue": max_queue}
    return _connect(url, **options)


def handshake_status(err: InvalidHandshake) -> Optional[int]:
    """The HTTP status of a refused upgrade (legacy ``InvalidStatusCode.status_code``, new
    ``InvalidStatus.response.status_code``), or None when the handshake failed otherwise."""
    status = getattr(err, "status_code", None)
    if isinstance(status, int):
        return status
    response = getattr(err, "response", None)
    status = getattr(response, "status_code", None)
    return status if isinstance(status, int) else None


def close_reason(err: ConnectionClosed) -> str:
    """``code: reason`` of the close frame received (1006 when none came), without the ``code`` and
    ``reason`` attributes websockets 13.1 deprecated."""
    received = err.rcvd
    if received is None:
        return "1006"
    return f"{received.code}{': ' + received.reason if received.reason else ''}"
