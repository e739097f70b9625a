"""The worker's event loop: asyncio, or uvloop when asked for (``SHAREDOS_UVLOOP=1``).

uvloop (the ``fast`` extra) cut the CPU each process spends per request/reply by
about 6 % on the benchmark (cheaper socket writes and wake-ups; see README,
Performance). It is opt-in: without it the host behaves and measures the same as
before, and timing-sensitive deployments keep the loop they tested.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

from ..errors import ConfigurationError

__all__ = ["loop_factory", "run", "uvloop_enabled"]

_T = TypeVar("_T")


def uvloop_enabled() -> bool:
    """True when ``SHAREDOS_UVLOOP`` is ``1``."""
    return os.environ.get("SHAREDOS_UVLOOP", "0") == "1"


def loop_factory() -> Callable[[], asyncio.AbstractEventLoop] | None:
    """uvloop's loop factory when enabled, else None (asyncio's default loop).

    Raises:
        ConfigurationError: uvloop was asked for but is not installed.
    """
    if not uvloop_enabled():
        return None
    try:
        import uvloop  # the optional ``fast`` extra, imported only when asked for
    except ImportError as exc:
        raise ConfigurationError(
            "SHAREDOS_UVLOOP=1 needs uvloop: pip install 'sharedos-redis[fast]'") from exc
    factory: Callable[[], asyncio.AbstractEventLoop] = uvloop.new_event_loop
    return factory


def run(main: Coroutine[Any, Any, _T]) -> _T:
    """``asyncio.run(main)`` on the loop :func:`loop_factory` picks.

    Raises:
        ConfigurationError: uvloop was asked for but is not installed.
    """
    factory = loop_factory()
    with asyncio.Runner(loop_factory=factory) as runner:
        return runner.run(main)
