"""RedisRequestRouter.resolve_reply: wake-ups, outcomes, deadlines, cancellation, failures."""

from __future__ import annotations

from typing import Any

import anyio
import fakeredis
import pytest
from redis.asyncio import Redis
from redis.exceptions import ConnectionError as RedisConnectionError

from sharedos_redis.errors import (
    RequestCancelled,
    RequestFailed,
    RequestOutcomeError,
    RequestTimedOut,
    StoreUnavailable,
    UnknownMessage,
)
from sharedos_redis.kernel.contracts import DeliveryAccepted, MessageEnvelope, format_timestamp
from sharedos_redis.router import RedisRequestRouter, RouterSettings
from sharedos_redis.router.listener import SettledListener, WaitSlot
from sharedos_redis.store.keys import Keys
from sharedos_redis.store.markers import MarkerStore

from .router_support import (
    Keyspace,
    ObservedMarkers,
    make_context,
    make_reply,
    make_request,
    now_ms,
    put_marker,
    put_markers,
    state_of,
)

pytestmark = pytest.mark.anyio

FAST = RouterSettings(listener_block_ms=50, grace_ms=50, max_concurrent_checks=8)


def receipt(request: MessageEnvelope) -> DeliveryAccepted:
    return DeliveryAccepted(message_id=request.id, timestamp=format_timestamp())


async def test_settled_before_the_wait_returns_at_once(redis: Redis, ns: str,
                                                       keyspace: Keyspace) -> None:
    context = make_context(ns)
    request = make_request(context)
    await put_marker(redis, context, request, deadline_ms=now_ms() + 30_000)
    reply = make_reply(request)
    assert (await MarkerStore(redis).settle_reply(ns, reply)).settled
    async with RedisRequestRouter(redis, settings=FAST) as router:
        with anyio.fail_after(2):
            assert await router.resolve_reply(context, request, receipt(request)) == reply
    await keyspace()


async def test_settled_after_the_wait_starts_wakes_the_waiter(redis: Redis, ns: str,
                                                              keyspace: Keyspace) -> None:
    context = make_context(ns)
    request = make_request(context)
    await put_marker(redis, context, request, deadline_ms=now_ms() + 30_000)
    reply = make_reply(request)
    markers = ObservedMarkers(redis)
    results: list[MessageEnvelope] = []
    async with RedisRequestRouter(redis, settings=FAST, markers=markers) as router:

        async def wait() -> None:
            results.append(await router.resolve_reply(context, request, receipt(request)))

        with anyio.fail_after(5):
            async with anyio.create_task_group() as tg:
                tg.start_soon(wait)
                await markers.wait_checks(1)
                assert (await MarkerStore(redis).settle_reply(ns, reply)).settled
    assert results == [reply]
    assert markers.checks == 2  # the wake-up is a hint: the marker is read once more
    await keyspace()


@pytest.mark.parametrize(("state", "code", "error", "expected"), [
    ("failed", "recipient_turn_denied", RequestFailed, "recipient_turn_denied"),
    ("dead", "recipient_unknown", RequestFailed, "request_dead_lettered"),
    ("cancelled", "request_cancelled", RequestCancelled, "request_cancelled"),
    ("timed_out", "request_timed_out", RequestTimedOut, "request_timed_out"),
])
async def test_a_settled_failure_raises_its_typed_error(
        redis: Redis, ns: str, keyspace: Keyspace, state: Any, code: str,
        error: type[RequestOutcomeError], expected: str) -> None:
    context = make_context(ns)
    before, after = make_request(context, id="m-before"), make_request(context, id="m-after")
    await put_marker(redis, context, before, deadline_ms=now_ms() + 30_000)
    await put_marker(redis, context, after, deadline_ms=now_ms() + 30_000)
    await MarkerStore(redis).settle_failure(ns, before.id, state=state, code=code)
    markers = ObservedMarkers(redis)
    async with RedisRequestRouter(redis, settings=FAST, markers=markers) as router:
        with anyio.fail_after(5):
            with pytest.raises(error) as raised:
                await router.resolve_reply(context, before, receipt(before))
            assert (raised.value.message_id, raised.value.code) == (before.id, expected)

            async def settle_later() -> None:
                await markers.wait_checks(2)
                await MarkerStore(redis).settle_failure(ns, after.id, state=state, code=code)

            async with anyio.create_task_group() as tg:
                tg.start_soon(settle_later)
                with pytest.raises(error) as raised:
                    await router.resolve_reply(context, after, receipt(after))
            assert (raised.value.message_id, raised.value.code) == (after.id, expected)
    await keyspace()


async def test_the_deadline_times_the_request_out(redis: Redis, ns: str,
                                                  keyspace: Keyspace) -> None:
    context = make_context(ns)
    request = make_request(context)
    await put_marker(redis, context, request, deadline_ms=now_ms() + 100)
    async with RedisRequestRouter(redis, settings=FAST) as router:
        with anyio.fail_after(5), pytest.raises(RequestTimedOut):
            await router.resolve_reply(context, request, receipt(request))
    assert await state_of(redis, ns, request.id) == "timed_out"
    late = await MarkerStore(redis).settle_reply(ns, make_reply(request))
    assert (late.settled, late.code) == (False, "request_closed")
    assert await redis.zcard(Keys(ns).open) == 0
    await keyspace()


async def test_a_lost_wake_up_still_returns_the_real_settlement(
        redis: Redis, ns: str, keyspace: Keyspace, monkeypatch: pytest.MonkeyPatch) -> None:
    context = make_context(ns)
    request = make_request(context)
    await put_marker(redis, context, request, deadline_ms=now_ms() + 150)
    reply = make_reply(request)
    markers = ObservedMarkers(redis)
    monkeypatch.setattr(WaitSlot, "settle", lambda self, outcome: None)  # every wake-up is lost
    async with RedisRequestRouter(redis, settings=FAST, markers=markers) as router:
        with anyio.fail_after(5):
            async with anyio.create_task_group() as tg:

                async def settle() -> None:
                    await markers.wait_checks(1)
                    assert (await MarkerStore(redis).settle_reply(ns, reply)).settled

                tg.start_soon(settle)
                assert await router.resolve_reply(context, request, receipt(request)) == reply
    assert await state_of(redis, ns, request.id) == "replied"
    await keyspace()


async def test_caller_cancellation_marks_the_request_cancelled(redis: Redis, ns: str,
                                                               keyspace: Keyspace) -> None:
    context = make_context(ns)
    request = make_request(context)
    await put_marker(redis, context, request, deadline_ms=now_ms() + 30_000)
    markers = ObservedMarkers(redis)
    finished = False
    async with RedisRequestRouter(redis, settings=FAST, markers=markers) as router:
        with anyio.fail_after(5):
            async with anyio.create_task_group() as tg:

                async def wait() -> None:
                    nonlocal finished
                    await router.resolve_reply(context, request, receipt(request))
                    finished = True

                tg.start_soon(wait)
                await markers.wait_checks(1)
                tg.cancel_scope.cancel()
        assert not finished
        assert await state_of(redis, ns, request.id) == "cancelled"
        assert router._listener is not None and not router._listener._slots  # unregistered
        with pytest.raises(RequestCancelled):
            await router.resolve_reply(context, request, receipt(request))
    await keyspace()


async def test_unknown_request_raises(redis: Redis, ns: str, keyspace: Keyspace) -> None:
    context = make_context(ns)
    async with RedisRequestRouter(redis, settings=FAST) as router:
        request = make_request(context, id="m-404")
        with anyio.fail_after(5), pytest.raises(UnknownMessage):
            await router.resolve_reply(context, request, receipt(request))
    assert await keyspace() == set()


async def test_a_broken_listener_connection_rechecks_every_waiter(
        redis: Redis, ns: str, keyspace: Keyspace, monkeypatch: pytest.MonkeyPatch) -> None:
    context = make_context(ns)
    request = make_request(context)
    await put_marker(redis, context, request, deadline_ms=now_ms() + 30_000)
    reply = make_reply(request)
    markers = ObservedMarkers(redis)
    down, proceed = anyio.Event(), anyio.Event()
    original = SettledListener._read
    armed = False

    async def flaky_read(self: SettledListener, conn: Redis, positions: Any) -> Any:
        if armed and not down.is_set():
            down.set()
            await proceed.wait()
            raise RedisConnectionError("connection reset by peer")
        return await original(self, conn, positions)

    monkeypatch.setattr(SettledListener, "_read", flaky_read)
    async with RedisRequestRouter(redis, settings=FAST, markers=markers) as router:
        with anyio.fail_after(5):
            async with anyio.create_task_group() as tg:

                async def break_and_settle() -> None:
                    nonlocal armed
                    await markers.wait_checks(1)
                    armed = True
                    await down.wait()  # the listener is "disconnected" now
                    assert (await MarkerStore(redis).settle_reply(ns, reply)).settled
                    await redis.xtrim(Keys(ns).settled, maxlen=0)  # the wake-up entry is lost
                    proceed.set()

                tg.start_soon(break_and_settle)
                assert await router.resolve_reply(context, request, receipt(request)) == reply
    await keyspace()


async def test_redis_failure_raises_store_unavailable_without_hanging() -> None:
    server = fakeredis.FakeServer()
    server.connected = False
    client = fakeredis.FakeAsyncRedis(server=server)
    context = make_context("t-down")
    request = make_request(context)
    try:
        async with RedisRequestRouter(client, settings=FAST) as router:
            with anyio.fail_after(5), pytest.raises(StoreUnavailable):
                await router.resolve_reply(context, request, receipt(request))
    finally:
        await client.aclose()


def _pool_size(client: Redis) -> int:
    pool: Any = client.connection_pool
    return len(pool._available_connections) + len(pool._in_use_connections)


async def test_a_thousand_waiters_share_a_bounded_number_of_connections(
        redis: Redis, redis_factory: Any, ns: str, keyspace: Keyspace) -> None:
    count, limit = 1000, 8
    context = make_context(ns)
    requests = [make_request(context, id=f"m-{i}") for i in range(count)]
    await put_markers(redis, context, requests, deadline_ms=now_ms() + 60_000)
    router_client: Redis = await redis_factory()
    markers = ObservedMarkers(router_client)
    settler = MarkerStore(redis)
    results: dict[str, MessageEnvelope] = {}
    settings = RouterSettings(listener_block_ms=50, grace_ms=50, max_concurrent_checks=limit)
    async with RedisRequestRouter(router_client, settings=settings, markers=markers) as router:

        async def wait(request: MessageEnvelope) -> None:
            results[request.id] = await router.resolve_reply(context, request, receipt(request))

        with anyio.fail_after(30):
            async with anyio.create_task_group() as tg:
                for request in requests:
                    tg.start_soon(wait, request)
                await markers.wait_checks(count)
                assert markers.max_in_flight == limit  # waiters overlapped up to the limiter
                assert _pool_size(router_client) <= limit + 1
                for request in requests:
                    assert (await settler.settle_reply(ns, make_reply(request))).settled
    assert _pool_size(router_client) <= limit + 1
    assert {mid: reply.reply_to for mid, reply in results.items()} == {
        r.id: r.id for r in requests}
    await keyspace()


async def test_a_waiter_whose_redis_call_fails_ends_its_request(
        redis: Redis, ns: str, keyspace: Keyspace) -> None:
    from sharedos_redis.errors import StoreUnavailable

    context = make_context(ns)
    request = make_request(context)
    await put_marker(redis, context, request, deadline_ms=now_ms() + 30_000)

    class Flaky(MarkerStore):
        failed = False

        async def fields(self, namespace: str, message_id: str,
                         names: Any) -> list[str | None]:
            if not Flaky.failed:
                Flaky.failed = True
                raise StoreUnavailable("resolve", "timed out")
            return await super().fields(namespace, message_id, names)

    async with RedisRequestRouter(redis, settings=FAST, markers=Flaky(redis)) as router:
        with anyio.fail_after(5), pytest.raises(StoreUnavailable):
            await router.resolve_reply(context, request, receipt(request))
    assert await state_of(redis, ns, request.id) == "cancelled"  # not left open
    await keyspace()


async def test_leaving_the_router_does_not_sit_out_a_blocked_read(redis: Redis,
                                                                   ns: str) -> None:
    """Closing a host is prompt: the listener's XREAD BLOCK is cancelled, not waited for."""
    context = make_context(ns)
    request = make_request(context)
    await put_marker(redis, context, request, deadline_ms=now_ms() + 30_000)
    slow = RouterSettings(listener_block_ms=20_000, grace_ms=50, max_concurrent_checks=8)
    markers = ObservedMarkers(redis)
    with anyio.fail_after(5):
        async with (RedisRequestRouter(redis, settings=slow, markers=markers) as router,
                    anyio.create_task_group() as tg):
            tg.start_soon(router.resolve_reply, context, request, receipt(request))
            await markers.wait_checks(1)  # its namespace is read from now on
            tg.cancel_scope.cancel()
    assert not router.running
