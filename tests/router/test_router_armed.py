"""Armed waiters: the transport arms the reply waiter before its accept script runs, so
the waiter needs no durable read before it waits, and still misses no settlement."""

from __future__ import annotations

import itertools
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from functools import partial

import anyio
import pytest
from anyio.abc import TaskStatus
from redis.asyncio import Redis

from sharedos_redis.kernel.contracts import AccessContext, DeliveryAccepted, MessageEnvelope
from sharedos_redis.router import RedisRequestRouter, RouterSettings
from sharedos_redis.router.listener import SettledListener
from sharedos_redis.store.keys import Keys
from sharedos_redis.store.markers import MarkerStore
from sharedos_redis.transport import RedisStreamTransport

from .router_support import ObservedMarkers, make_context, make_reply, make_request

pytestmark = [pytest.mark.anyio, pytest.mark.usefixtures("served")]  # no worker runs

FAST = RouterSettings(listener_block_ms=50, grace_ms=50, max_concurrent_checks=8)


async def _accept(transport: RedisStreamTransport, context: AccessContext,
                  request: MessageEnvelope) -> DeliveryAccepted:
    receipt = await transport.deliver(context, request)
    assert isinstance(receipt, DeliveryAccepted)
    return receipt


async def _until(done: Callable[[], bool]) -> None:
    """Return once ``done()`` holds (the caller's ``fail_after`` bounds the wait)."""
    for _ in itertools.count():
        if done():
            return
        await anyio.sleep(0.01)


async def _listener_read(router: RedisRequestRouter, ns: str) -> None:
    """Return once the listener has read the namespace's settled stream to its end."""
    listener = router._listener
    assert listener is not None
    last = (await listener._redis.xrevrange(Keys(ns).settled, "+", "-", count=1))[0][0]
    await _until(lambda: listener._streams[ns].position == last.decode())


async def _read_namespace(router: RedisRequestRouter, transport: RedisStreamTransport,
                          context: AccessContext) -> None:
    """One request resolved the ordinary way: the listener now reads the namespace."""
    first = make_request(context, id="m-0")
    receipt = await _accept(transport, context, first)
    assert (await MarkerStore(transport._redis).settle_reply(context.namespace_id,
                                                             make_reply(first))).settled
    await router.resolve_reply(context, first, receipt)


@dataclass
class _World:
    router: RedisRequestRouter
    transport: RedisStreamTransport
    listener: SettledListener
    markers: ObservedMarkers
    context: AccessContext


@asynccontextmanager
async def _world(redis: Redis, ns: str, settings: RouterSettings = FAST
                 ) -> AsyncIterator[_World]:
    """A router, a transport arming its waiters, and a namespace the listener reads."""
    markers = ObservedMarkers(redis)
    async with RedisRequestRouter(redis, settings=settings, markers=markers) as router:
        transport = RedisStreamTransport(redis, watch=router)
        assert router._listener is not None
        world = _World(router, transport, router._listener, markers, make_context(ns))
        with anyio.fail_after(5):
            await _read_namespace(router, transport, world.context)
            yield world


async def test_a_settlement_before_the_wait_reaches_the_armed_waiter(redis: Redis,
                                                                     ns: str) -> None:
    async with _world(redis, ns) as w:
        before = w.markers.checks
        request = make_request(w.context, id="m-1")
        receipt = await _accept(w.transport, w.context, request)
        reply = make_reply(request)
        # settled (and even read by the listener) before anyone waits
        assert (await MarkerStore(redis).settle_reply(ns, reply)).settled
        await _listener_read(w.router, ns)  # and read by the listener: it kept it
        assert await w.router.resolve_reply(w.context, request, receipt) == reply
        assert w.markers.checks - before == 1  # one read, after the wake; none before it


async def _wait_for(w: _World, request: MessageEnvelope, receipt: DeliveryAccepted,
                    got: list[MessageEnvelope], *, task_status: TaskStatus[None]) -> None:
    """Start a waiter; signal ``started`` once it took its armed slot."""
    async with anyio.create_task_group() as tg:

        async def wait() -> None:
            got.append(await w.router.resolve_reply(w.context, request, receipt))

        tg.start_soon(wait)
        await _until(lambda: (w.context.namespace_id, request.id) not in w.listener._armed)
        task_status.started()


async def test_a_forged_entry_does_not_end_an_armed_wait(redis: Redis, ns: str) -> None:
    got: list[MessageEnvelope] = []
    async with _world(redis, ns) as w, anyio.create_task_group() as tg:
        request = make_request(w.context, id="m-1")
        receipt = await _accept(w.transport, w.context, request)
        checks = w.markers.checks
        await redis.xadd(Keys(ns).settled, {"id": "m-1", "state": "replied"})
        await redis.xadd(Keys(ns).settled, {"id": "m-1", "state": "failed", "result": "forged"})
        await tg.start(partial(_wait_for, w, request, receipt, got))
        await w.markers.wait_checks(checks + 1)  # woken by a forged entry: still open
        assert got == []
        reply = make_reply(request)
        assert (await MarkerStore(redis).settle_reply(ns, reply)).settled
    assert got == [reply]


async def test_nothing_is_armed_before_the_namespace_is_read(redis: Redis, ns: str) -> None:
    async with RedisRequestRouter(redis, settings=FAST) as router:
        assert router.expect(ns, "m-1") is False


async def test_a_refused_accept_disarms_its_waiter(redis: Redis, ns: str) -> None:
    async with _world(redis, ns) as w:
        duplicate = make_request(w.context, id="m-0")  # the id of the first request
        assert (await w.transport.deliver(w.context, duplicate)).status == "denied"
        assert w.listener._armed == {} and w.listener._slots == {}


async def test_a_reconnect_makes_an_armed_waiter_read_the_marker(redis: Redis,
                                                                 ns: str) -> None:
    async with _world(redis, ns) as w:
        request = make_request(w.context, id="m-1")
        receipt = await _accept(w.transport, w.context, request)
        await w.listener.recheck()  # what a broken listener connection runs
        before = w.markers.checks
        assert (await MarkerStore(redis).settle_reply(ns, make_reply(request))).settled
        assert (await w.router.resolve_reply(w.context, request, receipt)).reply_to == "m-1"
        assert w.markers.checks - before == 1  # the durable check before the wait, no wake


async def test_an_armed_waiter_nobody_claims_is_dropped(redis: Redis, ns: str) -> None:
    async with _world(redis, ns, FAST.model_copy(update={"namespace_linger_s": 0.2})) as w:
        await _accept(w.transport, w.context, make_request(w.context, id="m-1"))
        assert list(w.listener._armed) == [(ns, "m-1")]
        await _until(lambda: not w.listener._armed)
        assert w.listener._slots == {}


async def test_an_armed_waiter_reads_the_marker_once_after_its_wake(redis: Redis,
                                                                    ns: str) -> None:
    got: list[MessageEnvelope] = []
    async with _world(redis, ns) as w, anyio.create_task_group() as tg:
        request = make_request(w.context, id="m-1")
        receipt = await _accept(w.transport, w.context, request)
        before = w.markers.checks
        await tg.start(partial(_wait_for, w, request, receipt, got))
        with anyio.move_on_after(0.3):  # an unarmed waiter would read the marker now
            await w.markers.wait_checks(before + 1)
        assert w.markers.checks == before  # the armed one reads nothing before waiting
        assert (await MarkerStore(redis).settle_reply(ns, make_reply(request))).settled
    assert [r.reply_to for r in got] == ["m-1"]
    assert w.markers.checks - before == 1
