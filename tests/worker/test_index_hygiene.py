"""Index hygiene: a request record that vanished while open (expiry, eviction) is
forgotten from every index, dead-lettered, logged, and its waiter ends typed; the
reconciler's passes stay bounded and never stall on such ids.

Runs on fakeredis and on real Redis (REDIS_URL). A vanished record is simulated by
deleting the request's hash, which is exactly what an expiry or an eviction does.
"""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncIterator

import anyio
import pytest
from redis.asyncio import Redis

from sharedos_redis.errors import RequestExpired
from sharedos_redis.kernel.contracts import (
    DeliveryAccepted,
    JsonValue,
    MessageEnvelope,
    agent,
    format_timestamp,
)
from sharedos_redis.kernel.turn import RuntimeHost, TurnRequest
from sharedos_redis.router import RedisRequestRouter, RouterSettings
from sharedos_redis.store.keys import Keys
from sharedos_redis.store.markers import MarkerStore
from sharedos_redis.transport.relay import OutboxRelay
from sharedos_redis.worker.host import MessagingHost
from sharedos_redis.worker.local import LocalWorker
from sharedos_redis.worker.reconciler import STEP_LIMIT, Reconciler

from ..router.router_support import ObservedMarkers
from ..support import scan_keyspace
from .helpers import Clock, ask, drop_namespace, invoke_grant, make_host, put, send_grant

pytestmark = [pytest.mark.anyio, pytest.mark.usefixtures("served")]  # no worker runs

FAST = RouterSettings(listener_block_ms=50, grace_ms=50)



@pytest.fixture
async def world(redis: Redis, ns: str) -> AsyncIterator[tuple[MessagingHost, Clock]]:
    host = make_host(redis, ns, {"bob": ask("alice", {}), "alice": ask("bob", {})},
                     claim_idle_s=1, lease_s=1)
    clock = Clock()
    host.markers = MarkerStore(redis, clock_ms=clock)
    yield host, clock
    await drop_namespace(redis, ns)


def reconciler(host: MessagingHost, woken: list[str] | None = None) -> Reconciler:
    async def wake(namespace: str, message_id: str) -> None:
        """The relay's wake-up (not exercised here)."""

    async def rewake(namespace: str, message_id: str, reason: str) -> None:
        if woken is None:
            raise AssertionError(f"a vanished or live request was re-woken: {message_id}")
        woken.append(message_id)

    relay = OutboxRelay(host.redis, [host.namespace], wake, consumer="r1", block_ms=10,
                        claim_idle_ms=60_000)
    return Reconciler(host, relay, rewake)


async def accept(host: MessagingHost) -> MessageEnvelope:
    context = host.context_for("bob", purpose="p", trace_id=f"t-{time.time_ns()}")
    envelope = MessageEnvelope(id=f"m-{time.time_ns()}", sender=agent("bob"),
                               receiver=agent("alice"), purpose="p", payload={},
                               trace_id=context.trace_id, created_at=format_timestamp())
    assert (await host.transport.deliver(context, envelope)).status == "accepted"
    return envelope


async def in_index(redis: Redis, key: str, member: str) -> bool:
    return await redis.zscore(key, member) is not None


async def test_a_vanished_running_request_is_forgotten_in_one_pass(
        world: tuple[MessagingHost, Clock], redis: Redis, caplog: pytest.LogCaptureFixture
) -> None:
    host, clock = world
    ns, keys = host.namespace, Keys(host.namespace)
    poisoned, later = await accept(host), await accept(host)
    claim = await host.markers.claim_turn(ns, poisoned.id, lease_ms=60_000, max_attempts=3,
                                          worker="w")
    assert claim.outcome == "claimed" and await in_index(redis, keys.leases, poisoned.id)
    watcher = ObservedMarkers(redis)
    caught: list[RequestExpired] = []
    async with RedisRequestRouter(redis, settings=FAST, markers=watcher) as router:

        async def wait() -> None:
            context = host.context_for("bob", purpose="p", trace_id=poisoned.trace_id)
            receipt = DeliveryAccepted(message_id=poisoned.id, timestamp=format_timestamp())
            with pytest.raises(RequestExpired) as raised:
                await router.resolve_reply(context, poisoned, receipt)
            caught.append(raised.value)

        # the request's deadline is 10 s away: the waiter must end long before it
        with anyio.fail_after(4), caplog.at_level(logging.WARNING, "sharedos_redis.worker"):
            async with anyio.create_task_group() as tg:
                tg.start_soon(wait)
                await watcher.wait_checks(1)  # the waiter is registered and has read the marker
                await redis.delete(keys.message(poisoned.id))  # the record expires
                counts = await reconciler(host).reconcile_once()
    assert counts["timed_out"] == 0 and counts["rewoken"] == 0
    assert [(e.message_id, e.code) for e in caught] == [(poisoned.id, "request_expired")]
    assert not await in_index(redis, keys.open, poisoned.id)
    assert not await in_index(redis, keys.leases, poisoned.id)
    assert await in_index(redis, keys.open, later.id)  # a live request is left alone
    letters = await host.markers.dead_letters(ns)
    assert [(d["id"], d["reason"]) for d in letters] == [(poisoned.id, "request_expired")]
    logged = [r.getMessage() for r in caplog.records if r.name == "sharedos_redis.worker"]
    assert len(logged) == 1 and all(f"{k}={v}" in logged[0] for k, v in [
        ("namespace", ns), ("message", poisoned.id), ("reason", "request_expired")])
    # a later request that goes overdue is still timed out by the next pass
    clock.offset_ms = 11_000
    assert (await reconciler(host).reconcile_once())["timed_out"] == 1
    state = await host.markers.fields(ns, later.id, ("state",))
    assert state == ["timed_out"]
    remaining = await scan_keyspace(redis, ns)
    assert keys.open not in remaining and keys.leases not in remaining  # both indexes empty
    assert keys.message(poisoned.id) not in remaining
    assert len(await host.markers.dead_letters(ns)) == 1  # forgotten once, not per pass


async def test_thousands_of_vanished_ids_do_not_stall_the_reconciler(
        world: tuple[MessagingHost, Clock], redis: Redis) -> None:
    host, clock = world
    ns, keys = host.namespace, Keys(host.namespace)
    real = await accept(host)
    past = int(time.time() * 1000) - 60_000  # due before the real request, in both indexes
    poisoned = 2_000
    await redis.zadd(keys.open, {f"gone-open-{i}": past + i for i in range(poisoned)})
    await redis.zadd(keys.leases, {f"gone-lease-{i}": past + i for i in range(poisoned)})
    clock.offset_ms = 11_000  # the real request is overdue too
    woken: list[str] = []
    sweeper = reconciler(host, woken)
    passes, timed_out, left = 0, 0, 2 * poisoned + 1
    with anyio.fail_after(60):
        while timed_out == 0 or left > 0:
            timed_out += (await sweeper.reconcile_once())["timed_out"]
            after = await redis.zcard(keys.open) + await redis.zcard(keys.leases)
            passes += 1
            # each step reads at most STEP_LIMIT entries (three steps) yet always progresses
            assert left - 3 * STEP_LIMIT - 1 <= after < left
            assert passes <= poisoned // STEP_LIMIT, "the reconciler stalled on vanished ids"
            left = after
    assert woken == []  # no vanished id was ever re-woken
    assert await host.markers.fields(ns, real.id, ("state",)) == ["timed_out"]
    assert await redis.xlen(keys.dead) == 2 * poisoned
    assert (await sweeper.reconcile_once())["timed_out"] == 0  # and nothing is left to do


async def test_a_requester_whose_request_vanishes_mid_turn_gets_a_typed_outcome(
        redis: Redis, ns: str) -> None:
    keys = Keys(ns)

    async def alice(turn: TurnRequest, host: RuntimeHost) -> JsonValue:
        await redis.delete(keys.message(turn.message.id))  # evicted while alice works
        await anyio.sleep_forever()  # until the lost lease cancels this turn
        raise AssertionError("unreachable")

    host = make_host(redis, ns, {"bob": ask("alice", {"q": 1}), "alice": alice}, lease_s=0.6)
    await put(host, send_grant(ns, "bob", "alice"), invoke_grant(ns, "bob"),
              invoke_grant(ns, "alice"))
    try:
        async with host, LocalWorker(host):
            started = time.monotonic()
            with anyio.fail_after(8):
                result = await host.start_turn("bob", {}, purpose="atlas-status")
            elapsed = time.monotonic() - started
        assert result.status == "succeeded", result
        tool_result = result.output
        assert isinstance(tool_result, dict) and tool_result["status"] == "failed"
        error = tool_result["error"]
        assert isinstance(error, dict) and error["code"] == "message_reply_resolution_failed"
        assert error["details"] == {"outcome": "request_expired"}
        assert elapsed < 5  # well before the 10 s request deadline: the lease renewal saw it
        letters = await host.markers.dead_letters(ns)
        assert [d["reason"] for d in letters] == ["request_expired"]
        assert await redis.zcard(keys.open) == 0 and await redis.zcard(keys.leases) == 0
    finally:
        await drop_namespace(redis, ns)
