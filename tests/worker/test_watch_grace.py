"""A running turn watches its request's settlements only once it has run a while
(``_WATCH_AFTER_S``): a quick turn costs the worker's listener no read, a long one is
still stopped at once when its request is cancelled.

Two hosts share one backend: the requester's (bob's turns, no worker) and the worker's
(``LocalWorker`` running alice), so the worker's own listener reads can be counted.
"""

from __future__ import annotations

import time
from functools import partial
from typing import Any

import anyio
import pytest
from redis.asyncio import Redis

from sharedos_redis.kernel.contracts import JsonValue
from sharedos_redis.kernel.turn import RuntimeHost, TurnRequest
from sharedos_redis.router.listener import SettledListener
from sharedos_redis.worker.local import LocalWorker

from .helpers import answer, ask, invoke_grant, make_host, put, send_grant

pytestmark = pytest.mark.anyio


@pytest.fixture
def reads(monkeypatch: pytest.MonkeyPatch) -> list[SettledListener]:
    """Every listener's settlement read, by listener."""
    seen: list[SettledListener] = []
    original = SettledListener._read

    async def counted(self: SettledListener, conn: Any, positions: Any) -> Any:
        seen.append(self)
        return await original(self, conn, positions)

    monkeypatch.setattr(SettledListener, "_read", counted)
    return seen


async def test_a_quick_turn_costs_the_workers_listener_no_read(
        redis: Redis, ns: str, cleanup: None, reads: list[SettledListener]) -> None:
    app = make_host(redis, ns, {"bob": ask("alice", {"q": 1})})
    worker = make_host(redis, ns, {"alice": answer({"ok": True})})
    await put(app, send_grant(ns, "bob", "alice"), invoke_grant(ns, "bob"),
              invoke_grant(ns, "alice"))
    async with app, worker, LocalWorker(worker):
        with anyio.fail_after(10):
            for _ in range(5):
                result = await app.start_turn("bob", {}, purpose="atlas-status")
                assert result.status == "succeeded", result
                assert result.output["status"] == "succeeded", result.output
        listener = worker.router._listener
    assert listener is not None
    assert [r for r in reads if r is listener] == []  # alice's turns were never watched
    assert any(r is not listener for r in reads)  # bob's waits were read by his process


async def test_a_long_turn_is_watched_and_stopped_at_once_when_cancelled(
        redis: Redis, ns: str, cleanup: None, reads: list[SettledListener]) -> None:
    started, stopped = anyio.Event(), anyio.Event()

    async def slow(turn: TurnRequest, host: RuntimeHost) -> JsonValue:
        started.set()
        try:
            await anyio.sleep(30)
        finally:
            stopped.set()
        return {}

    app = make_host(redis, ns, {"bob": ask("alice", {"q": 1})})
    worker = make_host(redis, ns, {"alice": slow})
    await put(app, send_grant(ns, "bob", "alice"), invoke_grant(ns, "bob"),
              invoke_grant(ns, "alice"))
    async with app, worker, LocalWorker(worker), anyio.create_task_group() as tg:
        tg.start_soon(partial(app.start_turn, "bob", {}, purpose="atlas-status"))
        with anyio.fail_after(10):
            await started.wait()
            [mid] = [r.id for r in await app.router.pending(ns)]
            await anyio.sleep(0.2)  # past the grace: the turn watches its request
            cancelled = time.monotonic()
            assert (await app.router.cancel(ns, mid)).settled
            await stopped.wait()
        assert time.monotonic() - cancelled < 2  # at once, not at the next renewal (~1.7 s)
        assert any(r is worker.router._listener for r in reads)
        tg.cancel_scope.cancel()
