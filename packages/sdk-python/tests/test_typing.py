"""The package is typed (py.typed): mypy, with the settings in pyproject.toml, finds nothing in it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent


def test_mypy_finds_no_problem_in_the_package() -> None:
    checked = subprocess.run([sys.executable, "-m", "mypy", "warren"], cwd=PACKAGE, capture_output=True, text=True, timeout=600)
    assert checked.returncode == 0, checked.stdout + checked.stderr
