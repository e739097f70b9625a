"""OutboxRelay: wake first, then dispatch + XACK + XDEL; crash windows are claimed and re-woken."""

from __future__ import annotations

import anyio
import pytest
from redis.asyncio import Redis

from sharedos_redis.store.audit import RedisAuditSink
from sharedos_redis.store.keys import RELAY_GROUP, Keys
from sharedos_redis.transport import OutboxRelay, RedisStreamTransport, TransportSettings

from ..support import Keyspace, make_context, make_envelope, scan_keyspace

pytestmark = pytest.mark.anyio


class Waker:
    """A wake hook that records calls and can be told to fail."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, str]] = []
        self.fail = False
        self.woken = anyio.Event()

    async def __call__(self, namespace: str, message_id: str) -> None:
        self.calls.append((namespace, message_id))
        if self.fail:
            raise ConnectionError("arq unavailable")
        self.woken.set()


async def _accept(redis: Redis, ns: str, *ids: str) -> None:
    # no worker serves alice: the route check (tests/transport/test_route_lease.py) is off
    transport = RedisStreamTransport(redis, settings=TransportSettings(route_check=False))
    ctx = make_context(ns)
    for mid in ids:
        assert (await transport.deliver(ctx, make_envelope(ctx, id=mid))).status == "accepted"


async def _state(redis: Redis, ns: str, mid: str) -> bytes | None:
    state: bytes | None = await redis.hget(Keys(ns).message(mid), "state")
    return state


async def test_step_wakes_then_dispatches_and_trims_the_outbox(
    redis: Redis, ns: str, keys: Keys, keyspace: Keyspace
) -> None:
    await _accept(redis, ns, "m-1", "m-2")
    wake = Waker()
    relay = OutboxRelay(redis, [ns], wake, consumer="r1", block_ms=0)
    await relay.ensure_groups()

    assert await relay.step() == 2

    assert wake.calls == [(ns, "m-1"), (ns, "m-2")]
    assert await _state(redis, ns, "m-1") == b"dispatched"
    assert await redis.xlen(keys.outbox) == 0
    assert (await redis.xpending(keys.outbox, RELAY_GROUP))["pending"] == 0
    events = [e for _, e in await RedisAuditSink(redis).read(ns)]
    dispatched = [e for e in events if e.type == "message.dispatched"]
    assert [e.message_id for e in dispatched] == ["m-1", "m-2"]
    assert dispatched[0].actor == make_context(ns).actor  # attributed to the requester
    assert dispatched[0].trace_id == "trace-1" and dispatched[0].namespace_id == ns
    assert await relay.step() == 0
    assert await keyspace() == {keys.message("m-1"), keys.message("m-2"), keys.budget("trace-1"),
                                keys.open, keys.outbox, keys.audit, keys.trace("trace-1")}


async def test_failed_wake_stays_pending_until_claimed(
    redis: Redis, ns: str, keys: Keys, keyspace: Keyspace
) -> None:
    await _accept(redis, ns, "m-1")
    wake = Waker()
    wake.fail = True
    relay = OutboxRelay(redis, [ns], wake, consumer="r1", block_ms=0, claim_idle_ms=0)
    await relay.ensure_groups()

    assert await relay.step() == 0
    assert await _state(redis, ns, "m-1") == b"accepted"
    assert (await redis.xpending(keys.outbox, RELAY_GROUP))["pending"] == 1

    wake.fail = False
    assert await relay.claim_stale() == 1
    assert wake.calls == [(ns, "m-1"), (ns, "m-1")]
    assert await _state(redis, ns, "m-1") == b"dispatched"
    assert await redis.xlen(keys.outbox) == 0
    assert (await redis.xpending(keys.outbox, RELAY_GROUP))["pending"] == 0
    assert len(await keyspace()) == 6  # with the trace index


async def test_relay_that_died_after_reading_is_taken_over(
    redis: Redis, ns: str, keys: Keys, keyspace: Keyspace
) -> None:
    await _accept(redis, ns, "m-1")
    first = OutboxRelay(redis, [ns], Waker(), consumer="dead", block_ms=0)
    await first.ensure_groups()
    # The dead relay read the entry (and perhaps woke the recipient) but never dispatched.
    await redis.xreadgroup(RELAY_GROUP, "dead", {keys.outbox: ">"}, count=10)
    wake = Waker()
    patient = OutboxRelay(redis, [ns], wake, consumer="r2", block_ms=0, claim_idle_ms=60_000)
    assert await patient.step() == 0
    assert await patient.claim_stale() == 0  # not idle long enough yet
    eager = OutboxRelay(redis, [ns], wake, consumer="r2", block_ms=0, claim_idle_ms=0)

    assert await eager.claim_stale() == 1

    assert wake.calls == [(ns, "m-1")]
    assert await _state(redis, ns, "m-1") == b"dispatched"
    assert (await redis.xpending(keys.outbox, RELAY_GROUP))["pending"] == 0
    assert len(await keyspace()) == 6  # with the trace index


async def test_entries_of_running_settled_or_vanished_markers_are_only_acked(
    redis: Redis, ns: str, keys: Keys, keyspace: Keyspace
) -> None:
    await _accept(redis, ns, "running", "replied", "gone")
    await redis.hset(keys.message("running"), "state", "running")
    await redis.hset(keys.message("replied"), "state", "replied")
    await redis.delete(keys.message("gone"))
    relay = OutboxRelay(redis, [ns], Waker(), consumer="r1", block_ms=0)
    await relay.ensure_groups()

    assert await relay.step() == 3

    assert await _state(redis, ns, "running") == b"running"
    assert await _state(redis, ns, "replied") == b"replied"
    assert not await redis.exists(keys.message("gone"))
    assert await redis.xlen(keys.outbox) == 0
    types = [e.type for _, e in await RedisAuditSink(redis).read(ns)]
    assert "message.dispatched" not in types
    assert len(await keyspace()) == 7  # with the trace index


async def test_run_serves_several_namespaces_until_stopped(
    redis: Redis, ns: str, keyspace: Keyspace
) -> None:
    other = f"{ns}-b"
    wake = Waker()
    relay = OutboxRelay(redis, [ns, other], wake, consumer="r1", block_ms=50)
    try:
        with anyio.fail_after(10):
            async with anyio.create_task_group() as tg:
                await tg.start(relay.run)
                await _accept(redis, other, "x-1")
                await wake.woken.wait()
                wake.woken = anyio.Event()
                await _accept(redis, ns, "m-1")
                await wake.woken.wait()
                assert not relay.stopped.is_set()
                relay.stop()
                await relay.stopped.wait()
        assert wake.calls == [(other, "x-1"), (ns, "m-1")]
        assert await _state(redis, ns, "m-1") == b"dispatched"
        assert await _state(redis, other, "x-1") == b"dispatched"
    finally:
        leftover = await scan_keyspace(redis, other)
        if leftover:
            await redis.delete(*leftover)
    assert len(await keyspace()) == 6  # with the trace index


async def test_vanished_group_is_recreated(
    redis: Redis, ns: str, keys: Keys, keyspace: Keyspace
) -> None:
    relay = OutboxRelay(redis, [ns], Waker(), consumer="r1", block_ms=0)
    await relay.ensure_groups()
    await redis.delete(keys.outbox)
    assert await relay.step() == 0
    assert await relay.claim_stale() == 0
    await _accept(redis, ns, "m-1")
    assert await relay.step() == 1
    assert len(await keyspace()) == 6  # with the trace index
