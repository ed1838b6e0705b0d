"""The package's names as E2B's and Daytona's Python SDKs have them: ``Sandbox`` blocks,
``AsyncSandbox`` is asyncio; ``create`` takes the REST create body as typed keywords; the names
warren 0.1 had still work for one version, with a warning."""

from __future__ import annotations

import asyncio
import inspect
import warnings
from typing import Any, List

import pytest

import warren
from warren import AsyncImages, AsyncSandbox, AsyncSnapshots, AsyncVolumes, Images, Sandbox, Snapshots, Volumes
from warren._protocol import CreateSandboxRequest
from warren._pydantic import field_aliases
from warren.errors import InvalidParamsError


def test_sandbox_blocks_and_async_sandbox_awaits() -> None:
    assert not inspect.iscoroutinefunction(Sandbox.create) and not inspect.iscoroutinefunction(Sandbox.connect)
    assert inspect.iscoroutinefunction(AsyncSandbox.connect)
    assert hasattr(AsyncSandbox.create(), "__aenter__")  # awaitable and an async context manager, nothing sent yet
    for blocking, asynchronous in ((Snapshots, AsyncSnapshots), (Volumes, AsyncVolumes), (Images, AsyncImages)):
        assert inspect.iscoroutinefunction(asynchronous.list) and blocking is getattr(warren, blocking.__name__)


@pytest.mark.parametrize("create", [Sandbox.create, AsyncSandbox.create], ids=["Sandbox", "AsyncSandbox"])
def test_create_takes_every_field_of_the_rest_create_body_as_a_typed_keyword(create: Any) -> None:
    parameters = inspect.signature(create).parameters
    fields = set(field_aliases(CreateSandboxRequest))
    body = {name for name in parameters if name not in ("cls", "base_url", "api_key", "reconnect", "on_pull_progress")}
    assert body == fields, f"missing {fields - body}, not in the body {body - fields}: run `pnpm py:gen` and update create"
    assert all(p.kind is inspect.Parameter.KEYWORD_ONLY and p.annotation not in (inspect.Parameter.empty, "Any") for n, p in parameters.items() if n != "cls")
    assert not [p for p in parameters.values() if p.kind is inspect.Parameter.VAR_KEYWORD]


@pytest.mark.parametrize(
    "method", [AsyncSandbox.snapshot, AsyncSandbox.fork, AsyncSandbox.derive_token, AsyncSandbox.derive, AsyncSnapshots.prune, AsyncVolumes.create]
)
def test_the_other_request_bodies_are_typed_keywords_too(method: Any) -> None:
    parameters = inspect.signature(method).parameters
    assert not [p for p in parameters.values() if p.kind is inspect.Parameter.VAR_KEYWORD], method
    assert all(p.annotation is not inspect.Parameter.empty for n, p in parameters.items() if n != "self")


def test_a_wrong_create_option_is_refused_before_anything_is_sent() -> None:
    with pytest.raises(TypeError, match="ttlSeconds"):
        AsyncSandbox.create(ttlSeconds=60)  # type: ignore[call-arg]

    async def create() -> None:
        await AsyncSandbox.create(base_url="http://127.0.0.1:9", api_key="k", ttl_seconds="soon")  # type: ignore[arg-type]

    with pytest.raises(InvalidParamsError, match="ttl"):
        asyncio.run(create())  # the controller's URL does not answer: the check comes first


def test_the_old_blocking_names_still_work_and_say_what_replaces_them() -> None:
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        from warren.sync import Images as OldImages, Sandbox as OldSandbox, Snapshots as OldSnapshots, Volumes as OldVolumes
    assert (OldSandbox, OldSnapshots, OldVolumes, OldImages) == (Sandbox, Snapshots, Volumes, Images)
    messages = [str(w.message) for w in seen if issubclass(w.category, DeprecationWarning)]
    assert len(messages) == 4 and any("`from warren import Sandbox`" in m and "0.3.0" in m for m in messages), messages
    with pytest.raises(ImportError):
        from warren.sync import Nothing  # type: ignore[attr-defined]  # noqa: F401


class _FakeAsyncSandbox:
    def __init__(self) -> None:
        self.exits: List[Any] = []

    async def __aexit__(self, *exc: Any) -> None:
        self.exits.append(exc)


def test_async_code_written_for_the_old_async_sandbox_gets_a_clear_error_and_no_leaked_sandbox() -> None:
    made = _FakeAsyncSandbox()
    blocking = Sandbox(made)

    async def old_style() -> None:
        await blocking

    with pytest.raises(TypeError, match="from warren import AsyncSandbox"):
        asyncio.run(old_style())

    async def old_context() -> None:
        async with blocking:
            pass

    with pytest.raises(TypeError, match="AsyncSandbox"):
        asyncio.run(old_context())
    assert len(made.exits) == 2  # the sandbox each made was ended (a created one is killed)
