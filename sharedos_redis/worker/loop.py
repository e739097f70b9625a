"""The worker's event loop: uvloop when the ``fast`` extra is installed, else asyncio.

uvloop cuts the CPU each process spends per request/reply by about 6 % on the
benchmark (fewer cycles per socket write and wake-up; see README, Performance).
``SHAREDOS_UVLOOP=0`` keeps the standard loop even when uvloop is installed.
"""

from __future__ import annotations

import asyncio
import importlib.util
import os
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

__all__ = ["loop_factory", "run", "uvloop_enabled"]

_T = TypeVar("_T")


def uvloop_enabled() -> bool:
    """True when uvloop is installed and ``SHAREDOS_UVLOOP`` is not ``0``."""
    return (os.environ.get("SHAREDOS_UVLOOP", "1") != "0"
            and importlib.util.find_spec("uvloop") is not None)


def loop_factory() -> Callable[[], asyncio.AbstractEventLoop] | None:
    """uvloop's loop factory when enabled, else None (asyncio's default loop)."""
    if not uvloop_enabled():
        return None
    import uvloop  # the optional ``fast`` extra, imported only when used

    factory: Callable[[], asyncio.AbstractEventLoop] = uvloop.new_event_loop
    return factory


def run(main: Coroutine[Any, Any, _T]) -> _T:
    """``asyncio.run(main)`` on the loop :func:`loop_factory` picks."""
    with asyncio.Runner(loop_factory=loop_factory()) as runner:
        return runner.run(main)
