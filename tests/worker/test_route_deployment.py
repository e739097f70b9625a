"""Route leases with real ``sharedos-redis worker`` processes on a private ``redis-server``:
a worker that stops takes its agents' routes with it. Its open request fails
``route_unavailable`` long before its deadline (the reconciler of a worker still
running), and a new request is refused at accept with no hop and no use spent."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from typing import Any

import anyio
import pytest
from redis.asyncio import Redis

from sharedos_redis.store.keys import Keys
from sharedos_redis.store.usage import RedisGrantUsageStore
from sharedos_redis.worker.host import MessagingHost

from ..support import eventually
from . import proc_app
from .helpers import invoke_grant, put, send_grant
from .test_deployment import Worker, client, workers

pytestmark = [pytest.mark.anyio, pytest.mark.slow]
__all__ = ["client", "workers"]  # fixtures, imported


async def _lease(host: MessagingHost, agent_id: str) -> int | None:
    return await host.directory.expiry(host.namespace, agent_id)


async def _live(host: MessagingHost, agent_id: str) -> bool:
    expiry = await _lease(host, agent_id)
    return expiry is not None and expiry > int(time.time() * 1000)


async def _bob_asks(host: MessagingHost, trace_id: str) -> Any:
    with anyio.fail_after(15):
        result = await host.start_turn("bob", {}, purpose="atlas-status", trace_id=trace_id)
    assert result.status == "succeeded"
    return result.output


async def test_a_stopped_workers_agents_lose_their_route(
        server: Any, client: Redis, workers: Callable[..., Worker]) -> None:
    ns = f"r-{uuid.uuid4().hex[:8]}"
    # bob's turns run here; alice's on the worker that will die (a 0.3 s route lease,
    # shorter than its 1 s turn lease); a second worker serves bob only and reconciles
    host = proc_app.build(client, ns, url=server.url, bob_mode="block")
    grant = send_grant(ns, "bob", "alice", max_uses=10)
    await put(host, grant, invoke_grant(ns, "bob"), invoke_grant(ns, "alice"))
    doomed = workers(ns, TEST_ROUTE_LEASE_S="0.3")
    await eventually(lambda: _live(host, "alice"), timeout_s=20)
    usage = RedisGrantUsageStore(client)
    async with host, anyio.create_task_group() as tg:
        outcome: list[Any] = []

        async def ask() -> None:
            outcome.append(await _bob_asks(host, "trace-open"))

        tg.start_soon(ask)
        popped = await client.blpop([proc_app.signals_key(ns)], timeout=20)
        assert popped is not None, doomed.text()  # alice's turn runs on the doomed worker
        began = time.monotonic()
        doomed.stop()  # SIGKILL: no drain, no goodbye
        # started only now: workers of a namespace share the outbox, and one that does
        # not run alice must not be the one to wake her request (it would fail it
        # recipient_unknown)
        survivor = workers(ns, TEST_AGENTS="bob")
    elapsed = time.monotonic() - began
    print(f"\nroute_unavailable {elapsed:.2f}s after the kill (deadline 20 s)")
    # the open request failed early (its deadline is 20 s away), typed, through the
    # survivor's reconciler; bob's turn got the outcome and finished
    [to_alice] = outcome
    assert to_alice["status"] == "failed", to_alice
    assert to_alice["error"]["details"] == {"outcome": "route_unavailable"}
    assert elapsed < 8, elapsed
    assert await usage.used(ns, grant.id) == 1  # that request was accepted: one use

    # a new request to alice is refused at accept: typed, no hop, no use
    async with host:
        refused = await _bob_asks(host, "trace-new")
    assert refused["error"]["code"] == "message_request_not_accepted"
    assert refused["error"]["details"] == {"status": "denied", "code": "route_unavailable"}
    assert await usage.used(ns, grant.id) == 1
    assert await client.get(Keys(ns).budget("trace-new")) == str(
        host.settings.default_budget_hops).encode()
    assert survivor.proc.poll() is None, survivor.text()
    assert "Traceback" not in survivor.text()
