"""The worker's event loop: asyncio, or uvloop when asked for (``SHAREDOS_UVLOOP=1``).

uvloop (the ``fast`` extra) cut the CPU each process spends per request/reply by
about 6 % on the benchmark (cheaper socket writes and wake-ups; see README,
Performance). It is opt-in: without it the host behaves and measures the same as
before, and timing-sensitive deployments keep the loop they tested.

``run(..., shutdown_s=...)`` bounds the loop's own shut-down (which cancels and awaits
every task still left after ``main``): a worker process that has stopped exits
within that bound even if a task ignores its cancellation.
"""

from __future__ import annotations

import asyncio
import logging
import os
import threading
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

from ..errors import ConfigurationError

__all__ = ["loop_factory", "run", "uvloop_enabled"]

_T = TypeVar("_T")
log = logging.getLogger("sharedos_redis.worker")


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


def run(main: Coroutine[Any, Any, _T], *, shutdown_s: float | None = None) -> _T:
    """``asyncio.run(main)`` on the loop :func:`loop_factory` picks.

    ``shutdown_s``: once ``main`` returned, tasks still left are named in a WARNING and
    the loop's shut-down (cancelling and awaiting them) may take this long; after it
    the process exits at once, with ``main``'s result if an int (else 1).

    Raises:
        ConfigurationError: uvloop was asked for but is not installed.
    """
    factory = loop_factory()
    timer: threading.Timer | None = None
    try:
        with asyncio.Runner(loop_factory=factory) as runner:
            result = runner.run(main)
            if shutdown_s is not None:
                timer = _watch_shutdown(runner.get_loop(), shutdown_s,
                                        result if isinstance(result, int) else 1)
        return result
    finally:
        if timer is not None:
            timer.cancel()


def _watch_shutdown(loop: asyncio.AbstractEventLoop, shutdown_s: float,
                    code: int) -> threading.Timer:
    left = sorted(f"{task.get_name()} ({getattr(task.get_coro(), '__qualname__', '?')})"
                  for task in asyncio.all_tasks(loop))
    if left:
        log.warning("%d tasks left after the worker stopped: %s", len(left), "; ".join(left))
    timer = threading.Timer(shutdown_s, _exit_now, (shutdown_s, code))
    timer.daemon = True  # never keeps the process alive itself
    timer.start()
    return timer


def _exit_now(shutdown_s: float, code: int) -> None:
    log.warning("event loop still shutting down after %.0f s; exiting %d now", shutdown_s, code)
    logging.shutdown()  # flush the log handlers: os._exit skips them
    os._exit(code)
