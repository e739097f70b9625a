"""Stopping asyncio tasks within a bound, although a cancellation can be lost.

On Python 3.11, ``asyncio.wait_for`` returns the awaited result instead of raising
``CancelledError`` when its task is cancelled in the instant after the awaited
operation finished (CPython gh-86296, bpo-42130; 3.12 bases ``wait_for`` on
``asyncio.timeout``). redis-py wraps socket writes in ``wait_for``, so a task
cancelled just as it sent a command could run on as if never cancelled: arq's poll
loop, cancelled once at shut-down, kept polling and the drained process never exited.
The store's pools now write without ``wait_for`` (``store/connection.py``), but a
Redis Cluster client and other libraries still use it: :func:`stop_tasks` cancels
again while a task runs on, and gives up at a deadline.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any

__all__ = ["stop_tasks"]


async def stop_tasks(tasks: Mapping[str, asyncio.Future[Any]], timeout_s: float, *,
                     recancel_s: float = 0.25) -> list[str]:
    """Cancel ``tasks`` (again every ``recancel_s`` while one runs on) and wait for them,
    at most ``timeout_s``; returns the names of those still running (empty: all ended).

    Their results and errors are consumed (like ``gather(..., return_exceptions=True)``).
    """
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    pending = {task for task in tasks.values() if not task.done()}
    while pending:
        for task in pending:
            task.cancel()
        left_s = deadline - loop.time()
        if left_s <= 0:
            break
        _, pending = await asyncio.wait(pending, timeout=min(recancel_s, left_s))
    for task in tasks.values():
        if task.done() and not task.cancelled():
            task.exception()  # retrieved: no "exception was never retrieved" at exit
    return [name for name, task in tasks.items() if not task.done()]
