"""The queue between a connection's event frames and an ``async for`` consumer.

It bounds its memory by pausing the connection's reads while it holds more than the high-water
mark, so a slow consumer slows the sandbox process instead of filling this process's memory.
Leaving early (``aclose()``, or the ``async with`` block ending) stops the producing call.
"""

from __future__ import annotations

import asyncio
from collections import deque
from typing import Any, AsyncIterator, Callable, Deque, Generic, Optional, Tuple, TypeVar

T = TypeVar("T")

QUEUE_HIGH_WATER_BYTES = 4 * 1024 * 1024
QUEUE_LOW_WATER_BYTES = 1024 * 1024


class EventStream(Generic[T]):
    """An async iterator of events that is also an async context manager (``async with``)."""

    def __init__(self, connection: Any, on_abandon: Callable[[], None], on_take: Optional[Callable[[T], None]] = None) -> None:
        self._connection = connection
        self._on_abandon = on_abandon
        self._on_take = on_take
        self._items: Deque[Tuple[T, int]] = deque()
        self._bytes = 0
        self._paused = False
        self._ended = False
        self._failure: Optional[BaseException] = None
        self._wake = asyncio.Event()

    def push(self, item: T, size: int = 0) -> None:
        if self._ended:
            return
        self._items.append((item, size))
        self._bytes += size
        if not self._paused and self._bytes > QUEUE_HIGH_WATER_BYTES:
            self._paused = True
            self._connection.pause_reading()
        self._wake.set()

    def end(self) -> None:
        self._ended = True
        self._wake.set()

    def fail(self, err: BaseException) -> None:
        if self._failure is None:
            self._failure = err
        self._ended = True
        self._wake.set()

    def __aiter__(self) -> AsyncIterator[T]:
        return self

    async def __anext__(self) -> T:
        while True:
            if self._items:
                item, size = self._items.popleft()
                self._bytes -= size
                if self._paused and self._bytes < QUEUE_LOW_WATER_BYTES:
                    self._unpause()
                if self._on_take is not None:
                    self._on_take(item)
                return item
            if self._failure is not None:
                err, self._failure = self._failure, None
                self._unpause()
                raise err
            if self._ended:
                self._unpause()
                raise StopAsyncIteration
            self._wake.clear()
            await self._wake.wait()

    async def aclose(self) -> None:
        """Stops early: the producing call is cancelled (the command killed, the attach ended)."""
        if not self._ended:
            self._on_abandon()
        self._ended = True
        self._items.clear()
        self._bytes = 0
        self._unpause()

    async def __aenter__(self) -> "EventStream[T]":
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.aclose()

    def _unpause(self) -> None:
        if self._paused:
            self._paused = False
            self._connection.resume_reading()
