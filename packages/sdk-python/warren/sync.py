"""A blocking wrapper over the async SDK, for scripts and notebooks that do not run an event loop.

One background thread runs an event loop; every call is handed to it and waited for. Iterators
(``commands.stream``, ``ProcessHandle.attach``, a terminal's output) become plain iterators.

Example::

    from warren.sync import Sandbox

    with Sandbox.create(base_url=url, api_key=key) as sandbox:
        sandbox.files.write("a.py", "print(6 * 7)")
        print(sandbox.commands.run("python3 a.py").stdout)
"""

from __future__ import annotations

import asyncio
import inspect
import threading
from typing import Any, Coroutine, Iterator, List, Optional, TypeVar

from . import images as _images
from . import sandbox as _async

T = TypeVar("T")


class _Loop:
    """The event loop every sync handle shares, on a daemon thread started on first use."""

    _lock = threading.Lock()
    _loop: Optional[asyncio.AbstractEventLoop] = None

    @classmethod
    def get(cls) -> asyncio.AbstractEventLoop:
        with cls._lock:
            if cls._loop is None:
                loop = asyncio.new_event_loop()
                threading.Thread(target=loop.run_forever, name="warren-sync", daemon=True).start()
                cls._loop = loop
            return cls._loop

    @classmethod
    def run(cls, coro: "Coroutine[Any, Any, T]") -> T:
        future = asyncio.run_coroutine_threadsafe(coro, cls.get())
        try:
            return future.result()
        except KeyboardInterrupt:
            future.cancel()  # the call's task is cancelled, which sends the protocol's cancel
            raise


def _wrap(value: Any) -> Any:
    """Wraps what an async method returned: handles and streams become their blocking twins."""
    if hasattr(value, "__anext__"):
        return _SyncIterator(value)
    if isinstance(value, list):
        return [_wrap(v) for v in value]
    if type(value).__module__.startswith("warren.") and not type(value).__module__.startswith("warren._protocol") and hasattr(value, "__dict__"):
        if not isinstance(value, Exception) and not hasattr(value, "__dataclass_fields__"):
            return _Proxy(value)
    return value


class _SyncIterator(Iterator[Any]):
    def __init__(self, stream: Any) -> None:
        self._stream = stream

    def __iter__(self) -> "_SyncIterator":
        return self

    def __next__(self) -> Any:
        async def step() -> Any:
            try:
                return (False, await self._stream.__anext__())
            except StopAsyncIteration:
                return (True, None)

        done, item = _Loop.run(step())
        if done:
            raise StopIteration
        return item

    def close(self) -> None:
        """Stops early: the command is killed, the attach ends."""
        if hasattr(self._stream, "aclose"):
            _Loop.run(self._stream.aclose())

    def __enter__(self) -> "_SyncIterator":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


class _Proxy:
    """A blocking view of one async object (``files``, ``commands``, a process handle, a terminal)."""

    def __init__(self, target: Any) -> None:
        object.__setattr__(self, "_target", target)

    def __getattr__(self, name: str) -> Any:
        value = getattr(self._target, name)
        if inspect.iscoroutinefunction(value):
            return lambda *a, **k: _wrap(_Loop.run(value(*a, **k)))
        if inspect.isasyncgenfunction(value):
            return lambda *a, **k: _SyncIterator(value(*a, **k))
        if callable(value) and not isinstance(value, type):
            # Plain methods run on the loop's thread too: some start a task there (commands.stream).
            async def on_loop(*a: Any, **k: Any) -> Any:
                return value(*a, **k)

            return lambda *a, **k: _wrap(_Loop.run(on_loop(*a, **k)))
        return _wrap(value)

    def __setattr__(self, name: str, value: Any) -> None:
        setattr(self._target, name, value)

    def __iter__(self) -> Iterator[Any]:
        return _SyncIterator(self._target.__aiter__())

    def __enter__(self) -> "_Proxy":
        return self

    def __exit__(self, *exc: Any) -> None:
        closer = getattr(self._target, "__aexit__", None)
        if closer is not None:
            _Loop.run(closer(*exc))


class _HandleOrId:
    """A method that works on a handle (``sandbox.kill()``) and on the class with a sandbox id
    (``Sandbox.kill(sandbox_id, api_key=key)``), as its async twin does."""

    def __init__(self, name: str) -> None:
        self._name = name

    def __get__(self, handle: Any, owner: Any) -> Any:
        if handle is None:
            by_id = getattr(_async.Sandbox, self._name)
            return lambda *a, **k: _wrap(_Loop.run(by_id(*a, **k)))
        return _Proxy.__getattr__(handle, self._name)


class Sandbox(_Proxy):
    """The blocking twin of :class:`warren.Sandbox`: the same methods and namespaces, without ``await``."""

    @classmethod
    def create(cls, **options: Any) -> "Sandbox":
        """Creates a sandbox; ``with`` kills it at the end of the block."""
        return cls(_Loop.run(_async.Sandbox._create(options.pop("base_url", None), options.pop("api_key", None), options.pop("reconnect", None), options)))

    @classmethod
    def connect(cls, sandbox_id: str, **options: Any) -> "Sandbox":
        return cls(_Loop.run(_async.Sandbox.connect(sandbox_id, **options)))

    @staticmethod
    def list(**options: Any) -> List[Any]:
        return _Loop.run(_async.Sandbox.list(**options))

    #: ``sandbox.kill()``, or ``Sandbox.kill(sandbox_id, api_key=key)`` by id (False when there was none).
    kill = _HandleOrId("kill")
    #: ``sandbox.get_info()``, or ``Sandbox.get_info(sandbox_id, api_key=key)`` by id.
    get_info = _HandleOrId("get_info")
    #: ``sandbox.set_timeout(seconds)``, or ``Sandbox.set_timeout(sandbox_id, seconds, api_key=key)`` by id.
    set_timeout = _HandleOrId("set_timeout")


class Snapshots(_Proxy):
    """The blocking twin of :class:`warren.Snapshots`: ``list``, ``get``, ``delete`` and ``prune`` without ``await``."""

    def __init__(self, *, base_url: Optional[str] = None, api_key: Optional[str] = None) -> None:
        super().__init__(_async.Snapshots(base_url=base_url, api_key=api_key))


class Volumes(_Proxy):
    """The blocking twin of :class:`warren.Volumes`: ``create``, ``list``, ``get`` and ``delete`` without ``await``."""

    def __init__(self, *, base_url: Optional[str] = None, api_key: Optional[str] = None) -> None:
        super().__init__(_async.Volumes(base_url=base_url, api_key=api_key))


class Images(_Proxy):
    """The blocking twin of :class:`warren.Images`: ``pull``, ``build``, ``list`` and ``remove`` without ``await``.

    Example::

        from warren.sync import Images

        images = Images(base_url=url, api_key=key)
        images.build("./template", tag="py-tools:1", on_output=lambda t: print(t, end=""))
    """

    def __init__(self, *, base_url: Optional[str] = None, api_key: Optional[str] = None) -> None:
        super().__init__(_images.Images(base_url=base_url, api_key=api_key))
