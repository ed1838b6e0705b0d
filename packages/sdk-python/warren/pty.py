"""``sandbox.pty``: interactive programs on pseudo-terminals."""

from __future__ import annotations

import asyncio
from typing import Any, Callable, Dict, Optional, Sequence, Union

from ._pydantic import BaseModel

from ._protocol import PtyOpenResult
from ._stream import EventStream
from .connection import Caller
from .errors import InternalError

#: How a terminal ends: its exit code or signal, and how long it ran.
PtyExit = PtyOpenResult

#: How long a terminal may stay open, in seconds: a day, like the longest command.
TERMINAL_MAX = 24 * 60 * 60.0


class Terminal:
    """An interactive program on a pseudo-terminal. Iterate it (``async for chunk in term``) for its
    raw output bytes; send keystrokes with :meth:`write`. ``async with`` hangs it up at the end."""

    def __init__(self, connection: Caller, handle: str, pid: int, output: "EventStream[bytes]", exit: "asyncio.Task[PtyExit]") -> None:
        self._connection = connection
        #: Names this terminal in ``pty.write``, ``pty.resize`` and ``pty.kill``.
        self.handle = handle
        #: The program's pid in the sandbox.
        self.pid = pid
        self._output = output
        self._exit = exit

    async def write(self, data: Union[str, bytes], *, timeout: Optional[float] = None) -> int:
        """Sends raw input: keystrokes as text (``"ls\\r"``, ``"\\x03"`` for Ctrl-C) or bytes."""
        if isinstance(data, str):
            result, _ = await self._connection.call("pty.write", {"handle": self.handle, "data": data}, timeout=timeout)
        else:
            result, _ = await self._connection.call("pty.write", {"handle": self.handle}, payload=bytes(data), timeout=timeout)
        return int(result.bytes_written)

    async def resize(self, cols: int, rows: int, *, timeout: Optional[float] = None) -> None:
        """Changes the terminal's size; the program gets SIGWINCH."""
        await self._connection.call("pty.resize", {"handle": self.handle, "cols": cols, "rows": rows}, timeout=timeout)

    async def kill(self, signal: str = "SIGHUP", *, timeout: Optional[float] = None) -> None:
        """Signals the program (SIGHUP by default); SIGKILL ends everything started in the terminal."""
        await self._connection.call("pty.kill", {"handle": self.handle, "signal": signal}, timeout=timeout)

    async def wait(self) -> PtyExit:
        """The exit status, once the program has ended and its output is all delivered."""
        return await asyncio.shield(self._exit)

    def close(self) -> None:
        """Hangs up: the program and everything started in the terminal are killed."""
        self._exit.cancel()

    def __aiter__(self) -> "EventStream[bytes]":
        return self._output

    async def __aenter__(self) -> "Terminal":
        return self

    async def __aexit__(self, *exc: Any) -> None:
        self.close()


class Pty:
    """Interactive programs on pseudo-terminals."""

    def __init__(self, connection: Callable[[], Caller]) -> None:
        self._connection = connection

    async def create(
        self,
        cols: int,
        rows: int,
        *,
        cmd: Optional[Union[str, Sequence[str]]] = None,
        cwd: Optional[str] = None,
        env: Optional[Dict[str, str]] = None,
        on_data: Optional[Callable[[bytes], None]] = None,
    ) -> Terminal:
        """Opens a terminal and starts its program; raises PtyUnavailableError where terminals cannot open.

        With ``on_data``, output goes to that callback instead of the iterator (use it when nothing
        iterates the terminal: an unread queue pauses the connection once it holds 4 MiB).
        """
        connection = self._connection()
        params: Dict[str, Any] = {"cols": cols, "rows": rows}
        if cmd is not None:
            params["cmd"] = cmd if isinstance(cmd, str) else list(cmd)
        if cwd is not None:
            params["cwd"] = cwd
        if env is not None:
            params["env"] = dict(env)
        queue: "EventStream[bytes]" = EventStream(connection, lambda: None)
        started: "asyncio.Future[BaseModel]" = asyncio.get_running_loop().create_future()

        def on_event(name: str, data: BaseModel, body: Optional[bytes]) -> None:
            if name == "started" and not started.done():
                started.set_result(data)
            elif name == "output" and body:
                if on_data is not None:
                    on_data(body)
                else:
                    queue.push(body, len(body))

        async def run() -> PtyExit:
            try:
                result, _ = await connection.call("pty.open", params, on_event=on_event, timeout=TERMINAL_MAX)
            except BaseException as err:
                queue.fail(err) if not isinstance(err, asyncio.CancelledError) else queue.end()
                if not started.done():
                    started.set_exception(err if not isinstance(err, asyncio.CancelledError) else InternalError("The terminal was hung up."))
                raise
            queue.end()
            if not started.done():
                started.set_exception(InternalError("The terminal ended before it reported its start."))
            return result  # type: ignore[no-any-return]

        exit_task = asyncio.get_running_loop().create_task(run())
        # Its failure is reported through wait() and the iterator; never "never retrieved".
        exit_task.add_done_callback(lambda t: t.cancelled() or t.exception())
        try:
            info = await started
        except BaseException:
            exit_task.cancel()
            raise
        return Terminal(connection, info.handle, info.pid, queue, exit_task)  # type: ignore[attr-defined]
