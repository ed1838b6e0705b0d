"""Folder watches (``sandbox.files.watch``), the twin of the TypeScript SDK's ``Watcher``."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any, AsyncIterator, Callable, Dict, Literal, Optional, Union

from ._protocol import FsWatchChangesEventChangesItem
from ._pydantic import BaseModel
from ._stream import EventStream
from .connection import Caller
from .errors import InternalError


def _cancel(task: "Optional[asyncio.Task[Any]]") -> None:
    if task is not None:
        task.cancel()


__all__ = ["WatchChange", "WatchEvent", "WatchOverflow", "Watcher", "start_watch"]

#: A change to a path: ``type`` (``create``, ``write``, ``remove``, ``rename``), ``path``, ``from_``
#: (a rename's old path), ``directory``.
WatchChange = FsWatchChangesEventChangesItem

#: How long a watch may stay open, in seconds: a day.
WATCH_MAX_SECONDS = 24 * 60 * 60.0


@dataclass
class WatchOverflow:
    """Changes were dropped: ``queue`` (more paths changed between two batches than a batch holds,
    or a slow reader), ``watch-limit`` (more folders than the watch, or this handle's share of the
    sandbox's watches, may follow), ``kernel`` (changes came faster than the sandbox reads the
    kernel's queue). The watch goes on; rescan the folder (``files.list``) to catch up."""

    reason: Literal["queue", "watch-limit", "kernel"]
    dropped: int
    type: str = "overflow"


#: One thing a watch reports; nothing is dropped without a :class:`WatchOverflow`.
WatchEvent = Union[WatchChange, WatchOverflow]


class Watcher:
    """A live watch on a folder in the sandbox. Iterate it (``async for``) for :data:`WatchEvent`s, or
    pass ``on_event``; the iteration ends when the watch is closed or the folder is removed. Paths
    are shown as the sandbox's policy names them, and only paths the handle may read are reported.

    Example::

        async with await sandbox.files.watch("src") as watcher:
            async for event in watcher:
                print(event.type, getattr(event, "path", None) or event.reason)
    """

    def __init__(self, path: str, watched_folders: int, events: "EventStream[WatchEvent]", call: "asyncio.Task[str]") -> None:
        #: The watched folder as the policy names it.
        self.path = path
        #: How many folders the sandbox watches for it (the recursive tree, up to its cap).
        self.watched_folders = watched_folders
        self._events = events
        self._call = call

    async def done(self) -> str:
        """Waits for the watch to end: ``removed`` when the folder went, ``closed`` when it was closed."""
        return await asyncio.shield(self._call)

    async def close(self) -> None:
        """Stops watching; the sandbox removes its kernel watches."""
        self._call.cancel()
        await self._events.aclose()
        try:
            await self._call
        except BaseException:  # noqa: BLE001 - closing: how the call ended no longer matters
            pass

    def __aiter__(self) -> AsyncIterator[WatchEvent]:
        return self._events

    async def __aenter__(self) -> "Watcher":
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.close()


async def start_watch(
    connection: Caller,
    path: str,
    *,
    recursive: Optional[bool] = None,
    coalesce: Optional[float] = None,
    on_event: Optional[Callable[[WatchEvent], None]] = None,
) -> Watcher:
    """Starts a watch; returns once the sandbox has armed it (changes after that are reported).
    ``ResourceExhaustedError`` when the sandbox runs all the watches it may."""
    params: Dict[str, Any] = {"path": path}
    if recursive is not None:
        params["recursive"] = recursive
    if coalesce is not None:
        params["coalesceMs"] = int(coalesce * 1000)
    task: "Optional[asyncio.Task[str]]" = None
    events: "EventStream[WatchEvent]" = EventStream(connection, lambda: _cancel(task))
    ready: "asyncio.Future[Any]" = asyncio.get_running_loop().create_future()

    def deliver(event: WatchEvent, size: int) -> None:
        if on_event is not None:
            on_event(event)
        else:
            events.push(event, size)

    def on_frame(name: str, data: BaseModel, _payload: Optional[bytes]) -> None:
        if name == "ready" and not ready.done():
            ready.set_result(data)
        elif name == "changes":
            for change in data.changes:  # type: ignore[attr-defined]
                deliver(change, 64 + len(change.path))
        elif name == "overflow":
            deliver(WatchOverflow(data.reason, data.dropped), 64)  # type: ignore[attr-defined]

    async def run() -> str:
        try:
            result, _ = await connection.call("fs.watch", params, on_event=on_frame, timeout=WATCH_MAX_SECONDS)
        except asyncio.CancelledError:
            events.end()
            if not ready.done():
                ready.cancel()
            return "closed"  # closing the watch cancels the call: its normal end
        except BaseException as err:  # noqa: BLE001 - handed to the iterator and to done()
            events.fail(err)
            if not ready.done():
                ready.set_exception(err)
            raise
        events.end()
        if not ready.done():
            ready.set_exception(InternalError("The watch ended before the sandbox armed it."))
        return str(result.ended)

    task = asyncio.get_running_loop().create_task(run())
    # The outcome is reported through done() and the iterator; never as an unretrieved exception.
    task.add_done_callback(lambda t: None if t.cancelled() else t.exception())
    try:
        armed = await ready
    except BaseException:
        task.cancel()
        raise
    return Watcher(armed.path, armed.watched_folders, events, task)
