"""The package as a stranger installs it: a wheel built with Debian's setuptools (no download), whose
contents import on their own and carry py.typed and the generated modules."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

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
    assert not [n for n in names if n.startswith("tests/") or n.startswith("scripts/")]
    site = tmp_path / "site"
    zipfile.ZipFile(wheel).extractall(site)
    check = "import warren, warren.tools, warren.sync; assert warren.__file__.startswith(%r); print(len(warren.METHODS))" % str(site)
    imported = subprocess.run([sys.executable, "-c", check], cwd=tmp_path, env={**os.environ, "PYTHONPATH": str(site)}, capture_output=True, text=True)
    assert imported.returncode == 0, imported.stderr
    assert int(imported.stdout.strip()) > 30


def _pydantic_2_layout(site: Path) -> None:
    """pydantic 2's layout, as far as the SDK can tell: the v1 API as the package `pydantic.v1` (pydantic 2
    ships a copy of 1.10's source there, its absolute imports rewritten to `pydantic.v1.`), and a top
    level whose names are not the v1 API. PyPI is out of reach here, so the copy is Debian's 1.10."""
    import pydantic

    v1 = site / "pydantic" / "v1"
    shutil.copytree(Path(pydantic.__file__).parent, v1, ignore=shutil.ignore_patterns("__pycache__", "mypy.py", "_hypothesis_plugin.py"))
    for module in v1.glob("*.py"):
        module.write_text(module.read_text().replace("from pydantic.", "from pydantic.v1."))
    (site / "pydantic" / "__init__.py").write_text(
        'VERSION = "2.99.0+stand-in"\n\n\n'
        "def __getattr__(name):\n"
        '    raise ImportError(f"pydantic 2 stand-in: {name!r} is pydantic 1 API here; import it from pydantic.v1")\n'
    )


def test_the_sdk_runs_beside_pydantic_2_through_its_v1_api(tmp_path: Path) -> None:
    # The adapters serve frameworks that need pydantic 2: the SDK must install and work next to it.
    site = tmp_path / "site"
    _pydantic_2_layout(site)
    check = """
import pydantic, warren, warren.tools, warren.sync, warren.rest
from warren import _pydantic, _protocol
assert pydantic.VERSION.startswith("2."), pydantic.VERSION
assert _pydantic.BaseModel.__module__ == "pydantic.v1.main", _pydantic.BaseModel.__module__
header = _pydantic.parse_obj_as(_protocol.FrameHeader, {"type": "cancel", "id": 7})
assert type(header).__name__ == "FrameHeaderCancel", header
try:
    _pydantic.parse_obj_as(_protocol.FrameHeader, {"type": "cancel", "id": -1.5})
except _pydantic.ValidationError:
    print("ok")
"""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(site), str(PACKAGE)])}
    ran = subprocess.run([sys.executable, "-c", check], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout.strip() == "ok"
    # Without the v1 package the same top level is refused, so the check above cannot pass by accident.
    shutil.rmtree(site / "pydantic" / "v1")
    refused = subprocess.run([sys.executable, "-c", "import warren"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert refused.returncode != 0 and "pydantic 2 stand-in" in refused.stderr, refused.stderr
