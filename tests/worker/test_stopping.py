"""Stopping tasks within a bound although a cancellation can be lost (``stop_tasks``),
and a worker process whose loop shut-down waits on such a task still exits
(``loop.run(..., shutdown_s=...)``)."""

from __future__ import annotations

import asyncio
import contextlib
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from sharedos_redis.worker.stopping import stop_tasks

pytestmark = pytest.mark.anyio
ROOT = Path(__file__).resolve().parents[2]


async def _loses_first_cancellations(lost: int) -> str:
    """Like a loop whose cancellation redis-py's ``wait_for`` swallowed ``lost`` times."""
    for _ in range(lost):
        with contextlib.suppress(asyncio.CancelledError):  # lost: it runs on
            await asyncio.sleep(30)
    await asyncio.sleep(30)
    return "never"


async def _ignores_cancellation(release: asyncio.Event) -> None:
    while not release.is_set():
        with contextlib.suppress(asyncio.CancelledError):
            await release.wait()


async def _fails() -> None:
    raise RuntimeError("boom")


async def test_a_task_that_lost_its_cancellation_is_cancelled_again() -> None:
    task = asyncio.create_task(_loses_first_cancellations(2))
    await asyncio.sleep(0)
    started = time.monotonic()
    assert await stop_tasks({"poll": task}, 5, recancel_s=0.05) == []
    assert task.cancelled() and time.monotonic() - started < 1


async def test_a_task_that_ignores_every_cancellation_is_named_at_the_deadline() -> None:
    release = asyncio.Event()
    stuck = asyncio.create_task(_ignores_cancellation(release))
    failed = asyncio.create_task(_fails())
    await asyncio.sleep(0)
    started = time.monotonic()
    assert await stop_tasks({"stuck": stuck, "failed": failed}, 0.3, recancel_s=0.05) == ["stuck"]
    assert 0.3 <= time.monotonic() - started < 2
    assert failed.done() and not stuck.done()
    release.set()
    await stuck


def test_the_process_exits_with_its_code_when_the_loop_shutdown_waits_on_a_stuck_task(
        ) -> None:
    program = textwrap.dedent("""
        import asyncio, logging
        from sharedos_redis.worker.loop import run

        async def stuck():
            while True:
                try:
                    await asyncio.sleep(30)
                except asyncio.CancelledError:
                    pass

        async def main():
            asyncio.create_task(stuck(), name="stuck")
            await asyncio.sleep(0)
            return 3

        logging.basicConfig(level=logging.INFO)
        run(main(), shutdown_s=0.5)
        print("returned")  # never: the shut-down waits on the stuck task
    """)
    started = time.monotonic()
    done = subprocess.run([sys.executable, "-c", program], cwd=ROOT, capture_output=True,
                          text=True, timeout=20, check=False)
    assert done.returncode == 3, done.stderr
    assert time.monotonic() - started < 10
    assert "1 tasks left after the worker stopped: stuck (stuck)" in done.stderr
    assert "exiting 3 now" in done.stderr and "returned" not in done.stdout
