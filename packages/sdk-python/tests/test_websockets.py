"""warren/_ws.py: the websockets client is chosen by websockets' version, and what the two clients
report differently (a refused upgrade's status, a close's code) reads the same.

Only the installed websockets (Debian's 10.4 here) is exercised end to end, by tests/test_hostile.py;
the new client's branch is checked through the choice and the shapes its errors have.
"""

from __future__ import annotations

from types import SimpleNamespace

import websockets
from websockets.exceptions import ConnectionClosed, InvalidHandshake

from warren import _ws


def test_the_new_asyncio_client_is_used_from_websockets_13_on() -> None:
    assert [_ws.uses_new_client(v) for v in ("10.4", "11.0.3", "12.0", "13.0", "13.1", "14.2", "15.0.1", "junk")] == [
        False,
        False,
        False,
        True,
        True,
        True,
        True,
        False,
    ]
    assert _ws.NEW_CLIENT == _ws.uses_new_client(websockets.__version__)


class _Refused(InvalidHandshake):
    pass


def test_a_refused_upgrade_gives_its_status_under_either_client() -> None:
    legacy = _Refused("refused")
    legacy.status_code = 401  # type: ignore[attr-defined]  # the legacy client's InvalidStatusCode
    new = _Refused("refused")
    new.response = SimpleNamespace(status_code=503)  # type: ignore[attr-defined]  # the new client's InvalidStatus
    assert (_ws.handshake_status(legacy), _ws.handshake_status(new), _ws.handshake_status(_Refused("bad header"))) == (401, 503, None)


def test_a_close_reads_as_code_and_reason_from_the_frame_received() -> None:
    from websockets.frames import Close

    assert _ws.close_reason(ConnectionClosed(Close(1011, "daemon gone"), None)) == "1011: daemon gone"
    assert _ws.close_reason(ConnectionClosed(Close(1000, ""), None)) == "1000"
    assert _ws.close_reason(ConnectionClosed(None, None)) == "1006"
