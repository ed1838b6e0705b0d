"""Deprecated since warren 0.2.0, removed in 0.3.0: the blocking client is now ``warren`` itself.

``from warren.sync import Sandbox`` still works and warns; write ``from warren import Sandbox``
(and ``Snapshots``, ``Volumes``, ``Images``) instead. The asyncio client is ``warren.AsyncSandbox``.
"""

from __future__ import annotations

import warnings
from typing import Any

from . import blocking as _blocking

#: The old names and what replaces each.
_MOVED = {"Sandbox": "Sandbox", "Snapshots": "Snapshots", "Volumes": "Volumes", "Images": "Images"}


def __getattr__(name: str) -> Any:
    if name in _MOVED:
        warnings.warn(
            f"warren.sync.{name} is deprecated since warren 0.2.0 and goes in 0.3.0: import it as `from warren import {_MOVED[name]}` (the same blocking class).",
            DeprecationWarning,
            stacklevel=2,
        )
        return getattr(_blocking, _MOVED[name])
    raise AttributeError(f"module 'warren.sync' has no attribute {name!r}")


def __dir__() -> "list[str]":
    return sorted(_MOVED)
