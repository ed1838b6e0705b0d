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
