"""``Sandbox``: one sandbox, reached over one WebSocket through the controller."""

from __future__ import annotations

import types
from typing import Any, AsyncIterator, Awaitable, Callable, Dict, Generator, List, Mapping, Optional, Type, Union

from ._pydantic import BaseModel, ValidationError

from ._protocol import (
    AuditListResult,
    CreateSandboxRequest,
    CreateSnapshotRequest,
    CreateVolumeRequest,
    DeriveTokenRequest,
    DeriveTokenResponse,
    ForkSandboxRequest,
    PruneSnapshotsRequest,
    PruneSnapshotsResponse,
    SandboxInfo,
    SnapshotInfo,
    SystemInfoResult,
    VolumeInfo,
)
from .channel import Channel, ReconnectOptions
from .commands import Commands
from .connection import ApprovalHandler, Connection
from .errors import InvalidParamsError, WarrenError, make_error
from .files import Files
from .pty import Pty
from .rest import RestClient, resolve_controller

#: The most entries one ``audit.list`` page asks for.
AUDIT_PAGE_MAX = 10_000


def _wire(model: Type[BaseModel], options: Mapping[str, Any], what: str) -> Dict[str, Any]:
    """Options given in Python's names (``ttl_seconds``) or the wire's (``ttlSeconds``), checked
    strictly against the generated model and returned in the wire's names."""
    try:
        return model.parse_obj(dict(options)).dict(by_alias=True, exclude_unset=True)
    except ValidationError as err:
        issues = "; ".join(f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in err.errors()[:10])
        raise InvalidParamsError(f"Invalid {what}: {issues}") from None


def _wire_known(model: Type[BaseModel], options: Mapping[str, Any], what: str) -> Dict[str, Any]:
    """As :func:`_wire`, and an option the model does not name is refused (an answer model would
    drop it silently: a misspelt ``nmae`` must not make an unnamed snapshot)."""
    fields = model.__fields__
    known = set(fields) | {f.alias for f in fields.values()}
    unknown = sorted(k for k in options if k not in known)
    if unknown:
        raise InvalidParamsError(f"Invalid {what}: unknown option {', '.join(unknown)}; known: {', '.join(sorted(fields))}.")
    return _wire(model, options, what)


class _HandleOrId:
    """A method that works on a handle (``sandbox.kill()``) and, as in E2B's SDK, on the class with a
    sandbox id and no connection (``await Sandbox.kill(sandbox_id, api_key=key)``)."""

    def __init__(self, on_handle: Callable[..., Any], on_class: Callable[..., Any]) -> None:
        self._on_handle = on_handle
        self._on_class = on_class
        self.__doc__ = on_handle.__doc__

    def __get__(self, handle: Any, owner: Any) -> Any:
        if handle is None:
            return self._on_class
        return types.MethodType(self._on_handle, handle)


async def _kill_by_id(sandbox_id: str, *, token: Optional[str] = None, base_url: Optional[str] = None, api_key: Optional[str] = None) -> bool:
    """Removes sandbox ``sandbox_id`` without connecting to it (E2B's ``Sandbox.kill(sandbox_id)``), with
    its token or the API key: True when it was removed, False when there was no such sandbox.

    Example::

        await Sandbox.kill(sandbox_id, api_key=key)
    """
    url, key = resolve_controller(base_url, api_key)
    try:
        await RestClient(url, token if token is not None else key).kill(sandbox_id)
    except WarrenError as err:
        if err.code == "SANDBOX_NOT_FOUND":
            return False
        raise
    return True


async def _set_timeout_by_id(
    sandbox_id: str, ttl_seconds: int, *, token: Optional[str] = None, base_url: Optional[str] = None, api_key: Optional[str] = None
) -> SandboxInfo:
    """Moves the expiry of sandbox ``sandbox_id`` to ``ttl_seconds`` **seconds** from now without
    connecting to it (E2B's ``Sandbox.set_timeout(sandbox_id, timeout)``, seconds too).

    Example::

        await Sandbox.set_timeout(sandbox_id, 600, api_key=key)
    """
    url, key = resolve_controller(base_url, api_key)
    return await RestClient(url, token if token is not None else key).set_timeout(sandbox_id, ttl_seconds)


async def _get_info_by_id(sandbox_id: str, *, token: Optional[str] = None, base_url: Optional[str] = None, api_key: Optional[str] = None) -> SandboxInfo:
    """Describes sandbox ``sandbox_id`` without connecting to it (E2B's ``Sandbox.get_info(sandbox_id)``),
    with its token or the API key.

    Example::

        info = await Sandbox.get_info(sandbox_id, api_key=key)
    """
    url, key = resolve_controller(base_url, api_key)
    return await RestClient(url, token if token is not None else key).get(sandbox_id)


class Sandbox:
    """One sandbox. ``sandbox.files``, ``sandbox.commands`` and ``sandbox.pty`` are its capabilities.

    Leaving ``async with`` does what the handle owns: a handle from :meth:`create` kills its sandbox;
    one from :meth:`connect` or :meth:`derive` only closes its connection.

    Example::

        async with Sandbox.create(base_url=url, api_key=key) as sandbox:
            await sandbox.files.write("a.py", "print(6 * 7)")
            result = await sandbox.commands.run("python3 a.py")
    """

    def __init__(self, sandbox_id: str, token: str, rest: RestClient, connection: Channel, *, owns: bool = False, startup: Optional[Dict[str, Any]] = None) -> None:
        #: The sandbox id.
        self.id = sandbox_id
        #: The credential that reaches this sandbox only; hand it to a worker instead of the API key.
        self.token = token
        self._rest = rest
        #: The sandbox's calls; the connection under it comes back by itself when it drops.
        self._connection = connection
        self._owns = owns
        #: How this sandbox started, when this handle created it: ``readyMs`` and ``pooled``.
        self.startup = startup
        self.files = Files(lambda: self._connection)
        self.commands = Commands(lambda: self._connection)
        self.pty = Pty(lambda: self._connection)

    @staticmethod
    async def _channel(rest: RestClient, sandbox_id: str, credential: str, reconnect: Optional[ReconnectOptions]) -> Channel:
        """One reconnecting channel to a sandbox: its first connection is open before this returns."""

        def open() -> Awaitable[Connection]:
            return Connection.open(rest.connect_url(sandbox_id), credential)

        return Channel(open, await open(), reconnect)

    @staticmethod
    def create(*, base_url: Optional[str] = None, api_key: Optional[str] = None, reconnect: Optional[ReconnectOptions] = None, **options: Any) -> "_Creating":
        """Creates a sandbox and connects to it; await it, or use it with ``async with`` (which kills it at the end).

        ``options`` are the REST create body (docs/openapi.json ``CreateSandboxRequest``), in Python's
        names or the wire's: ``image``, ``ttl_seconds``, ``policy``, ``labels``, ``env``, ...
        ``on_pull_progress`` (a callable) pulls ``image`` first and is called with each progress line
        (``warren.images.PullProgressEvent``); without it a create of a missing image still pulls it, and simply takes longer.
        """
        return _Creating(base_url, api_key, reconnect, options)

    @classmethod
    async def _create(cls, base_url: Optional[str], api_key: Optional[str], reconnect: Optional[ReconnectOptions], options: Mapping[str, Any]) -> "Sandbox":
        url, key = resolve_controller(base_url, api_key)
        rest = RestClient(url, key)
        options = dict(options)
        on_pull_progress = options.pop("on_pull_progress", None)
        if on_pull_progress is not None and options.get("image") is not None:
            # Pulled first with its progress (answered at once when the engine has the image), then created.
            await rest.pull_image(str(options["image"]), lambda e: on_pull_progress(e) if getattr(e, "type", None) == "progress" else None)
        created = await rest.create(_wire(CreateSandboxRequest, options, "sandbox options"))
        try:
            connection = await Sandbox._channel(rest, created.id, created.token, reconnect)
        except BaseException:
            try:
                await rest.kill(created.id)
            except Exception:
                pass
            raise
        return cls(created.id, created.token, rest, connection, owns=True, startup={"readyMs": created.ready_ms, "pooled": created.pooled})

    @classmethod
    async def connect(
        cls,
        sandbox_id: str,
        *,
        token: Optional[str] = None,
        base_url: Optional[str] = None,
        api_key: Optional[str] = None,
        reconnect: Optional[ReconnectOptions] = None,
        resume: bool = True,
    ) -> "Sandbox":
        """Connects to a sandbox that already exists, with its token (or the API key).

        A paused sandbox is resumed first, as E2B's ``connect`` does (needs the lifecycle right); with
        ``resume=False`` connecting to it raises ``SandboxNotReadyError`` instead. A sandbox frozen for
        being idle, or hibernated, always wakes for a connection.

        Example::

            again = await Sandbox.connect(sandbox_id, token=token)
        """
        url, key = resolve_controller(base_url, api_key)
        credential = token if token is not None else key
        rest = RestClient(url, credential)
        try:
            channel = await Sandbox._channel(rest, sandbox_id, credential or "", reconnect)
        except WarrenError as err:
            # The controller refuses a connection to a paused sandbox; resume it and connect again.
            if not resume or err.code != "SANDBOX_NOT_READY":
                raise
            try:
                state = (await rest.get(sandbox_id)).state
            except WarrenError:
                raise err from None
            if state != "paused":
                raise
            await rest.action(sandbox_id, "resume")
            channel = await Sandbox._channel(rest, sandbox_id, credential or "", reconnect)
        return cls(sandbox_id, token or "", rest, channel)

    @staticmethod
    async def list(
        *, labels: Optional[Mapping[str, str]] = None, state: Optional[str] = None, base_url: Optional[str] = None, api_key: Optional[str] = None
    ) -> List[SandboxInfo]:
        """Sandboxes on the controller, filtered by labels (all must match) and state; needs the API key."""
        url, key = resolve_controller(base_url, api_key)
        return await RestClient(url, key).list(labels, state)

    @property
    def protocol(self) -> Any:
        """What this connection speaks: the major, the negotiated minor, the server's minor and name."""
        return self._connection.protocol

    @property
    def on_approval(self) -> Optional[ApprovalHandler]:
        """Answers the sandbox's approval requests (seed 001); return True to allow. None denies."""
        return self._connection.on_approval

    @on_approval.setter
    def on_approval(self, handler: Optional[ApprovalHandler]) -> None:
        self._connection.on_approval = handler

    async def info(self) -> SandboxInfo:
        """The sandbox's state as the controller sees it."""
        return await self._rest.get(self.id)

    async def _get_info(self) -> SandboxInfo:
        """The sandbox's state as the controller sees it (E2B's name for :meth:`info`)."""
        return await self._rest.get(self.id)

    #: ``sandbox.get_info()`` describes this sandbox; ``await Sandbox.get_info(sandbox_id, api_key=key)``
    #: describes one by id without connecting, as in E2B's SDK.
    get_info = _HandleOrId(_get_info, _get_info_by_id)

    async def _set_timeout(self, ttl_seconds: int) -> SandboxInfo:
        """Moves the sandbox's expiry to ``ttl_seconds`` **seconds** from now (shorter or longer): the
        unit E2B's Python SDK uses for ``set_timeout(timeout)`` too (its JavaScript SDK, and
        Warren's, take milliseconds)."""
        return await self._rest.set_timeout(self.id, ttl_seconds)

    #: ``await sandbox.set_timeout(600)`` moves this sandbox's expiry to 600 **seconds** from now;
    #: ``await Sandbox.set_timeout(sandbox_id, 600, api_key=key)`` moves one by id, as in E2B's Python SDK.
    set_timeout = _HandleOrId(_set_timeout, _set_timeout_by_id)

    async def keepalive(self) -> SandboxInfo:
        """Moves the expiry to the sandbox's own ttl from now; never shortens it."""
        return await self._rest.action(self.id, "keepalive")

    async def pause(self) -> SandboxInfo:
        """Freezes every process in the sandbox; calls wait until :meth:`resume`."""
        return await self._rest.action(self.id, "pause")

    async def resume(self) -> SandboxInfo:
        return await self._rest.action(self.id, "resume")

    async def hibernate(self) -> SandboxInfo:
        """Hibernates the sandbox: its container stops (its memory is freed), its id, token and files
        stay. The next call on any handle starts it again and waits for it; its processes start anew
        (docs/state.md). A sandbox created with ``hibernate_after_seconds`` hibernates by itself when idle.

        Example::

            await sandbox.hibernate()
            await sandbox.files.read("notes.md")  # wakes it, then reads
        """
        # This handle's connection would keep it awake: it is closed, and the next call opens a new one.
        await self._connection.sleep()
        return await self._rest.action(self.id, "hibernate")

    async def snapshot(self, **request: Any) -> SnapshotInfo:
        """Takes a snapshot of this sandbox's files (its container's changes and its workspace), owned by
        the API key this handle was made with (``name``, ``labels``); the sandbox is frozen briefly and
        keeps running. ``processes`` False in the answer says running processes were not kept
        (docs/state.md). Start sandboxes from it with ``Sandbox.create(snapshot=info.id)``.

        Example::

            snap = await sandbox.snapshot(name="before-fix", labels={"task": "t-42"})
            retry = await Sandbox.create(api_key=key, snapshot="before-fix")
        """
        return await self._rest.snapshot(self.id, _wire_known(CreateSnapshotRequest, request, "snapshot request"))

    async def fork(self, *, reconnect: Optional[ReconnectOptions] = None, **request: Any) -> "List[Sandbox]":
        """Makes ``count`` new sandboxes from this sandbox's current state (``labels``, ``ttl_seconds``),
        each independent of the others and of this one; each handle owns its sandbox (``async with``
        kills it). Needs the API key. All or nothing for the caller: when any fork fails to start,
        the ones that started are killed and the first failure is raised; ``fork_settled`` keeps them.

        Example::

            a, b, c = await sandbox.fork(count=3)
        """
        settled = await self.fork_settled(reconnect=reconnect, **request)
        failed = next((f for f in settled if isinstance(f, WarrenError)), None)
        if failed is None:
            return [f for f in settled if isinstance(f, Sandbox)]
        for fork in settled:
            if isinstance(fork, Sandbox):
                try:
                    await fork.kill()
                except Exception:
                    pass
        raise failed

    async def fork_settled(self, *, reconnect: Optional[ReconnectOptions] = None, **request: Any) -> "List[Union[Sandbox, WarrenError]]":
        """Makes ``count`` new sandboxes from this sandbox's current state, each settling alone (as
        E2B's ``Sandbox.fork``): one entry per requested fork, in order, a connected handle that owns
        its sandbox or the ``WarrenError`` that kept that fork from starting. Raises only when
        nothing was attempted or no fork started.

        Example::

            forks = await sandbox.fork_settled(count=5)
            running = [f for f in forks if isinstance(f, Sandbox)]
        """
        results = await self._rest.fork_results(self.id, _wire_known(ForkSandboxRequest, request, "fork request"))
        settled: "List[Union[Sandbox, WarrenError]]" = []
        for result in results:
            made = result.sandbox
            if made is None:
                error = result.error
                settled.append(
                    make_error(error.code, error.message, error.details)
                    if error is not None
                    else make_error("INTERNAL", "The controller answered a fork result with neither a sandbox nor an error.")
                )
                continue
            try:
                channel = await Sandbox._channel(self._rest, made.id, made.token, reconnect)
                settled.append(Sandbox(made.id, made.token, self._rest, channel, owns=True, startup={"readyMs": made.ready_ms, "pooled": made.pooled}))
            except WarrenError as err:
                # A fork this handle cannot reach is no use to the caller: it goes, and its entry says why.
                try:
                    await self._rest.kill(made.id)
                except Exception:
                    pass
                settled.append(err)
        return settled

    async def derive_token(self, **request: Any) -> DeriveTokenResponse:
        """A narrower token for this sandbox (``allow_read``, ``allow_write``, ``readonly``, ``allow_exec``, ``ttl_seconds``)."""
        return await self._rest.derive(self.id, _wire(DeriveTokenRequest, request, "derive request"))

    async def derive(self, **request: Any) -> "Sandbox":
        """A narrower handle on this sandbox (seed 001 ``derive()``); widening raises PermissionEscalationError."""
        token = (await self.derive_token(**request)).token
        rest = RestClient(self._rest.base_url, token)
        return Sandbox(self.id, token, rest, await Sandbox._channel(rest, self.id, token, None))

    async def daemon_info(self, *, timeout: Optional[float] = None) -> SystemInfoResult:
        """Asks the sandbox's daemon about itself: a real round trip through the controller."""
        result, _ = await self._connection.call("system.info", {}, timeout=timeout)
        return result  # type: ignore[no-any-return]

    async def audit_log(self, *, since: Optional[int] = None, limit: Optional[int] = None, timeout: Optional[float] = None) -> AuditListResult:
        """One page of the calls the sandbox's daemon served, oldest first; ``next_cursor`` continues."""
        params = {k: v for k, v in (("since", since), ("limit", limit)) if v is not None}
        result, _ = await self._connection.call("audit.list", params, timeout=timeout)
        return result  # type: ignore[no-any-return]

    async def audit_entries(self, *, since: Optional[int] = None, timeout: Optional[float] = None) -> AsyncIterator[Any]:
        """Every audit entry after ``since``, page by page as the loop asks for them."""
        while True:
            page = await self.audit_log(since=since, limit=AUDIT_PAGE_MAX, timeout=timeout)
            for entry in page.entries:
                yield entry
            if page.next_cursor is None:
                return
            since = page.next_cursor

    async def _kill(self) -> None:
        """Removes the sandbox: its container, files and processes are gone afterwards."""
        await self._connection.close()
        await self._rest.kill(self.id)

    #: ``sandbox.kill()`` removes this sandbox; ``await Sandbox.kill(sandbox_id, api_key=key)`` removes
    #: one by id without connecting (True when removed, False when there was none), as in E2B's SDK.
    kill = _HandleOrId(_kill, _kill_by_id)

    async def close(self) -> None:
        """Closes this client's connection; the sandbox keeps running."""
        await self._connection.close()

    async def __aenter__(self) -> "Sandbox":
        return self

    async def __aexit__(self, *exc: Any) -> None:
        if self._owns:
            await self.kill()
        else:
            await self.close()


class _Creating:
    """What :meth:`Sandbox.create` returns: awaitable (``await Sandbox.create()``) and an async
    context manager (``async with Sandbox.create() as sandbox``) that kills the sandbox at the end."""

    def __init__(self, base_url: Optional[str], api_key: Optional[str], reconnect: Optional[ReconnectOptions], options: Mapping[str, Any]) -> None:
        self._args = (base_url, api_key, reconnect, options)
        self._sandbox: Optional[Sandbox] = None

    def __await__(self) -> Generator[Any, None, Sandbox]:
        return Sandbox._create(*self._args).__await__()

    async def __aenter__(self) -> Sandbox:
        self._sandbox = await Sandbox._create(*self._args)
        return self._sandbox

    async def __aexit__(self, *exc: Any) -> None:
        if self._sandbox is not None:
            await self._sandbox.__aexit__(*exc)


class Snapshots:
    """The API key's snapshots on a controller: list, describe, delete, prune (docs/state.md). Each
    key sees its own only; another key's snapshot is ``SnapshotNotFoundError``.

    Example::

        snapshots = Snapshots(base_url=url, api_key=key)
        for s in await snapshots.list():
            print(s.id, s.name, s.size_bytes)
        await snapshots.prune(older_than_seconds=7 * 86400)
    """

    def __init__(self, *, base_url: Optional[str] = None, api_key: Optional[str] = None) -> None:
        url, key = resolve_controller(base_url, api_key)
        self._rest = RestClient(url, key)

    async def list(self) -> List[SnapshotInfo]:
        """The key's snapshots, newest first."""
        return await self._rest.list_snapshots()

    async def get(self, id_or_name: str) -> SnapshotInfo:
        """One snapshot by id or name."""
        return await self._rest.get_snapshot(id_or_name)

    async def delete(self, id_or_name: str) -> None:
        """Deletes a snapshot; sandboxes made from it keep their files."""
        await self._rest.delete_snapshot(id_or_name)

    async def prune(self, **request: Any) -> PruneSnapshotsResponse:
        """Deletes the key's snapshots older than ``older_than_seconds`` (0: all), with every given ``labels``."""
        return await self._rest.prune_snapshots(_wire_known(PruneSnapshotsRequest, request, "prune request"))


class Volumes:
    """The API key's named volumes: storage that outlives sandboxes, mounted with
    ``Sandbox.create(volumes=[{"name": ..., "path": ..., "readOnly": ...}])`` by any number of
    sandboxes at once (docs/state.md, Volumes).

    Example::

        volumes = Volumes(base_url=url, api_key=key)
        await volumes.create(name="pip-cache", size_mb=2048)
        a = await Sandbox.create(api_key=key, volumes=[{"name": "pip-cache", "path": "/cache"}])
    """

    def __init__(self, *, base_url: Optional[str] = None, api_key: Optional[str] = None) -> None:
        url, key = resolve_controller(base_url, api_key)
        self._rest = RestClient(url, key)

    async def create(self, **request: Any) -> VolumeInfo:
        """Creates a volume (``name``, ``size_mb``, ``labels``)."""
        return await self._rest.create_volume(_wire_known(CreateVolumeRequest, request, "volume request"))

    async def list(self) -> List[VolumeInfo]:
        return await self._rest.list_volumes()

    async def get(self, name: str) -> VolumeInfo:
        return await self._rest.get_volume(name)

    async def delete(self, name: str) -> None:
        """Deletes the volume and its data; refused (``ConflictError``) while a sandbox mounts it."""
        await self._rest.delete_volume(name)
