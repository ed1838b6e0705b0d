"""Test support: coroutine tests run on their own event loop, and a real controller for the
integration tests (scripts/local-controller.mjs: the controller over in-process daemons that the
TypeScript integration tier uses), started once per session and stopped when it ends."""

from __future__ import annotations

import asyncio
import inspect
import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

import pytest

PACKAGE = Path(__file__).resolve().parent.parent
REPO = PACKAGE.parent.parent
sys.path.insert(0, str(PACKAGE))

#: No coroutine test may run longer than this, in seconds.
TEST_TIMEOUT = 120.0


@pytest.hookimpl(tryfirst=True)
def pytest_pyfunc_call(pyfuncitem: Any) -> Any:
    """Runs ``async def`` tests with asyncio (Debian has no pytest-asyncio of the right age)."""
    if not inspect.iscoroutinefunction(pyfuncitem.obj):
        return None
    args = {name: pyfuncitem.funcargs[name] for name in pyfuncitem._fixtureinfo.argnames}
    asyncio.run(asyncio.wait_for(pyfuncitem.obj(**args), TEST_TIMEOUT))
    return True


@dataclass
class Controller:
    url: str
    api_key: str
    root: str
    #: 'local' (daemons in the controller's process) or 'docker' (real containers).
    engine: str = "local"


@pytest.fixture(scope="session")
def controller() -> Iterator[Controller]:
    """A real Warren controller: over in-process daemons, or over the Docker engine with
    WARREN_PY_ENGINE=docker; WARREN_TEST_URL/WARREN_TEST_API_KEY/WARREN_TEST_ROOT use a running one."""
    if os.environ.get("WARREN_TEST_URL"):
        root = os.environ.get("WARREN_TEST_ROOT", "/workspace")
        yield Controller(os.environ["WARREN_TEST_URL"], os.environ["WARREN_TEST_API_KEY"], root, "docker")
        return
    args = ["node", str(PACKAGE / "scripts" / "local-controller.mjs")]
    if os.environ.get("WARREN_PY_ENGINE") == "docker":
        args.append("--docker")
    proc = subprocess.Popen(args, cwd=REPO, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        if not line:
            raise RuntimeError(f"the local controller did not start (exit code {proc.wait(30)}); run `pnpm build` first")
        info = json.loads(line)
        yield Controller(info["url"], info["apiKey"], info["root"], info["engine"])
    finally:
        assert proc.stdin is not None
        proc.stdin.close()  # the script stops its controller when its stdin ends
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
