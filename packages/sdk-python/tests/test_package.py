"""The package as a stranger installs it: a wheel built with Debian's setuptools (no download), whose
contents import on their own and carry py.typed and the generated modules."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path
from typing import List, Optional

import pytest

PACKAGE = Path(__file__).resolve().parent.parent


def test_the_wheel_builds_offline_and_imports_outside_the_checkout(tmp_path: Path) -> None:
    source = tmp_path / "src"
    shutil.copytree(PACKAGE, source, ignore=shutil.ignore_patterns("__pycache__", ".mypy_cache", ".pytest_cache", "build", "*.egg-info"))
    out = tmp_path / "dist"
    out.mkdir()
    built = subprocess.run(
        [sys.executable, "-c", f"from setuptools import build_meta as b; print(b.build_wheel({str(out)!r}))"],
        cwd=source,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert built.returncode == 0, built.stderr
    wheel = out / built.stdout.strip().splitlines()[-1]
    names = zipfile.ZipFile(wheel).namelist()
    for name in ("warren/py.typed", "warren/_protocol.py", "warren/tools/_definitions.py", "warren/mcp.py"):
        assert name in names
    # The licence travels in the wheel's metadata, the same text as the repository's.
    licences = [n for n in names if n.endswith(".dist-info/LICENSE")]
    assert licences, names
    assert zipfile.ZipFile(wheel).read(licences[0]) == (PACKAGE.parent.parent / "LICENSE").read_bytes()
    assert not [n for n in names if n.startswith("tests/") or n.startswith("scripts/")]
    site = tmp_path / "site"
    zipfile.ZipFile(wheel).extractall(site)
    check = "import warren, warren.tools, warren.blocking, warren.transfer; assert warren.__file__.startswith(%r); print(len(warren.METHODS))" % str(site)
    imported = subprocess.run([sys.executable, "-c", check], cwd=tmp_path, env={**os.environ, "PYTHONPATH": str(site)}, capture_output=True, text=True)
    assert imported.returncode == 0, imported.stderr
    assert int(imported.stdout.strip()) > 30


def test_the_api_of_the_installed_pydantic_is_chosen_by_its_major_version() -> None:
    from warren import _pydantic

    assert [_pydantic.uses_v2_api(v) for v in ("2.0", "2.13.4", "3.1.0", "1.10.4", "1.10.17", "0.32", "junk")] == [True, True, True, False, False, False, False]
    import pydantic

    assert _pydantic.PYDANTIC_V2 == pydantic.VERSION.startswith("2."), pydantic.VERSION
    # The generated models name the constraints as pydantic 1 does; pydantic 2 gets its own names.
    assert _pydantic.v2_arguments("constr", {"strict": True, "regex": "^a$", "max_length": 3}) == {"strict": True, "pattern": "^a$", "max_length": 3}
    assert _pydantic.v2_arguments("conlist", {"min_items": 1, "max_items": 16}) == {"min_length": 1, "max_length": 16}
    assert _pydantic.v2_arguments("conint", {"strict": True, "ge": 0}) == {"strict": True, "ge": 0}


#: What the SDK does with its models, run under whichever pydantic the interpreter has.
MODEL_CHECKS = """
import warnings
warnings.simplefilter("error")  # a deprecated pydantic API (v1's under v2) fails the check
import pydantic, warren, warren.tools, warren.blocking, warren.rest, warren.transfer
from warren import _pydantic, _protocol as W
from warren.commands import with_output
from warren.errors import InvalidParamsError
from warren.frame import decode_frame, encode_frame
from warren.sandbox import _wire, _wire_known
from warren.tools import builtin_tools
assert _pydantic.PYDANTIC_V2 == pydantic.VERSION.startswith("2."), pydantic.VERSION
body = _wire(W.CreateSandboxRequest, {"ttl_seconds": 60, "memoryMb": 512, "env": {"A": "b"}, "user": "1000:1000",
    "egress": {"mode": "allow", "rules": [{"host": "pypi.org", "ports": [443]}]}}, "sandbox options")
assert body == {"ttlSeconds": 60, "memoryMb": 512, "env": {"A": "b"}, "user": "1000:1000",
    "egress": {"mode": "allow", "rules": [{"host": "pypi.org", "ports": [443]}]}}, body
for bad in ({"ttl_seconds": "60"}, {"nope": 1}, {"env": {"1A": "x"}}, {"egress": {"mode": "allow", "rules": []}}, {"cpus": True}):
    try:
        _wire(W.CreateSandboxRequest, bad, "sandbox options")
    except InvalidParamsError:
        continue
    raise AssertionError(f"accepted {bad}")
try:
    _wire_known(W.CreateSnapshotRequest, {"nmae": "x"}, "snapshot request")
    raise AssertionError("accepted nmae")
except InvalidParamsError as err:
    assert "unknown option nmae" in str(err), err
assert decode_frame(encode_frame({"type": "cancel", "id": 7})).header == {"type": "cancel", "id": 7}
for bad in ({"type": "cancel", "id": -1.5}, {"type": "cancel"}):
    try:
        decode_frame(encode_frame(bad))
        raise AssertionError(f"accepted {bad}")
    except warren.InvalidFrameError:
        pass
result = _pydantic.validate(W.METHODS["process.exec"].result, {"exitCode": 0, "signal": None, "stdout": "", "stderr": "", "durationMs": 1.5,
    "timedOut": False, "truncated": False, "stdoutBytes": 2, "stderrBytes": 1, "outputPayload": {"stdout": 2, "stderr": 1}, "addedLater": 1})
assert with_output(result, b"hie").stdout == "hi" and with_output(result, b"hie").stderr == "e"
assert _pydantic.dump(result, by_alias=True)["exitCode"] == 0
event = _pydantic.validate_as(W.ImageEvent, {"type": "done", "image": "a:1", "id": "sha256:" + "0" * 64})
assert type(event).__name__ == "ImageEventDone", event
import base64
png = b"\\x89PNG\\r\\n\\x1a\\n" + bytes(8)
shown = _pydantic.validate(W.CodeRunResultResultsItem, {"isMainResult": True, "data": {"image/png": base64.b64encode(png).decode()}, "truncated": False})
assert warren.display_image(shown).data == png
renamed = _pydantic.validate(W.FsWatchChangesEventChangesItem, {"type": "rename", "path": "b", "from": "a"})
assert renamed.from_ == "a", renamed
assert _pydantic.field_aliases(W.FsWatchChangesEventChangesItem)["from_"] == "from"
print("ok", pydantic.VERSION)
"""


def _run_model_checks(python: str, extra_path: List[str]) -> "subprocess.CompletedProcess[str]":
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(PACKAGE), *extra_path])}
    return subprocess.run([python, "-c", MODEL_CHECKS], cwd=PACKAGE, env=env, capture_output=True, text=True, timeout=120)


def test_the_sdk_checks_its_models_under_the_installed_pydantic() -> None:
    ran = _run_model_checks(sys.executable, [])
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout.startswith("ok"), ran.stdout


def _pydantic_2_python() -> Optional[str]:
    """An interpreter that has pydantic 2 (``WARREN_PY_PYDANTIC2``, else any ``python3`` on the PATH
    that is not this one): PyPI is out of reach on the project's machines, so this test runs where one is."""
    candidates = [os.environ.get("WARREN_PY_PYDANTIC2", "")] + [str(Path(d) / "python3") for d in os.environ.get("PATH", "").split(os.pathsep)]
    for python in candidates:
        if not python or not os.access(python, os.X_OK):
            continue
        probe = subprocess.run([python, "-c", "import pydantic; print(pydantic.VERSION)"], capture_output=True, text=True, timeout=60)
        if probe.returncode == 0 and probe.stdout.strip().startswith("2."):
            return python
    return None


def test_the_sdk_checks_its_models_with_pydantic_2s_own_api(tmp_path: Path) -> None:
    python = _pydantic_2_python()
    if python is None:
        pytest.skip("no interpreter with pydantic 2 here (set WARREN_PY_PYDANTIC2=/path/to/python3)")
    # That interpreter may lack websockets: lend it this one's (pure Python but for an optional speed-up).
    import websockets

    lent = tmp_path / "lent"
    lent.mkdir()
    (lent / "websockets").symlink_to(Path(websockets.__file__).parent)
    ran = _run_model_checks(python, [str(lent)])
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout.startswith("ok 2."), ran.stdout
