"""RedisAuditSink: append-only per namespace, trimmed, paged, failing loudly."""

from __future__ import annotations

import json

import anyio
import fakeredis
import pytest
from redis.asyncio import Redis

from sharedos_redis.errors import AuditUnavailable, StoreUnavailable
from sharedos_redis.kernel.audit import audit_event
from sharedos_redis.kernel.contracts import agent
from sharedos_redis.kernel.ports import AuditSink
from sharedos_redis.store.audit import RedisAuditSink, audit_fields, compact, decode_entry
from sharedos_redis.store.keys import Keys

from .store_support import drop_namespace, make_context, namespace_keys

pytestmark = pytest.mark.anyio


async def test_record_and_read_back_in_pages(redis: Redis, ns: str) -> None:
    sink = RedisAuditSink(redis)
    port: AuditSink = sink
    events = [audit_event(make_context(ns), "message.accepted", "succeeded", message_id=f"m-{i}")
              for i in range(5)]
    try:
        for event in events:
            await port.record(event)
        first = await sink.read(ns, count=2)
        rest = await sink.read(ns, after=first[-1][0])
        assert [e for _, e in first + rest] == events
        assert await sink.read(ns, after=rest[-1][0]) == []
        assert await sink.read(f"{ns}-other") == []
        assert await namespace_keys(redis, ns) == {Keys(ns).audit}
    finally:
        await drop_namespace(redis, ns)


async def test_stream_is_trimmed_to_about_maxlen(redis: Redis, ns: str) -> None:
    sink = RedisAuditSink(redis, maxlen=10)
    try:
        for i in range(300):
            await sink.record(audit_event(make_context(ns), "budget.set", "succeeded",
                                          id=f"e-{i}"))
        length = await redis.xlen(Keys(ns).audit)
        assert 10 <= length < 300
        [(_, newest)] = (await sink.read(ns, count=1000))[-1:]
        assert newest.id == "e-299"
    finally:
        await drop_namespace(redis, ns)


def test_audit_fields_is_the_stream_entry_layout() -> None:
    event = audit_event(make_context("n"), "message.accepted", "succeeded", id="e-1")
    assert audit_fields(event) == ["e", event.to_json()]


async def test_unreachable_redis_raises_audit_unavailable(ns: str) -> None:
    dead = Redis(host="127.0.0.1", port=1, socket_connect_timeout=0.5)
    try:
        with pytest.raises(AuditUnavailable):
            await RedisAuditSink(dead).record(audit_event(make_context(ns), "budget.set",
                                                          "succeeded"))
    finally:
        await dead.aclose()


async def test_deferred_records_are_written_in_order_in_the_background(redis: Redis,
                                                                        ns: str) -> None:
    import anyio

    from sharedos_redis.kernel.ports import DeferringAuditSink

    sink = RedisAuditSink(redis)
    _: DeferringAuditSink = sink
    ctx = make_context(ns)
    first = audit_event(ctx, "tool.invoked", "succeeded", tool="a")
    assert sink.record_later(first) is False  # no writer running: caller must record()
    try:
        async with anyio.create_task_group() as tg:
            await tg.start(sink.run)
            assert sink.record_later(audit_event(ctx, "tool.invoked", "succeeded", tool="b"))
            await sink.record(audit_event(ctx, "authorization.checked", "allowed"))
            assert sink.record_later(audit_event(ctx, "turn.ended", "succeeded"))
            sink.stop()  # writes what is queued before returning
        events = [event for _, event in await sink.read(ns)]
        assert [(e.type, e.tool) for e in events] == [
            ("tool.invoked", "b"), ("authorization.checked", None), ("turn.ended", None)]
        assert sink.record_later(first) is False  # stopped again
    finally:
        await drop_namespace(redis, ns)


async def test_queue_is_bounded(redis: Redis, ns: str) -> None:
    import anyio

    sink = RedisAuditSink(redis, max_pending=2)
    ctx = make_context(ns)
    try:
        async with anyio.create_task_group() as tg:
            await tg.start(sink.run)
            for tool in "abc":  # no await between: the writer cannot run yet
                sink.record_later(audit_event(ctx, "tool.invoked", "succeeded", tool=tool))
            sink.stop()
        assert sink.dropped == 1
        assert [e.tool for _, e in await sink.read(ns)] == ["b", "c"]
    finally:
        await drop_namespace(redis, ns)


async def test_background_writer_keeps_records_through_an_outage(ns: str) -> None:
    server = fakeredis.FakeServer()
    redis = fakeredis.FakeAsyncRedis(server=server)
    sink = RedisAuditSink(redis)
    events = [audit_event(make_context(ns), "message.sent", "succeeded", message_id=f"m-{i}")
              for i in range(3)]
    with anyio.fail_after(10):
        async with anyio.create_task_group() as tg:
            await tg.start(sink.run)
            server.connected = False  # Redis is down: every write fails
            assert all(sink.record_later(event) for event in events)
            await anyio.wait_all_tasks_blocked()  # the writer failed and is backing off
            assert await _read_or_none(sink, ns) is None
            server.connected = True
            sink.stop()
    assert [e for _, e in await sink.read(ns)] == events and sink.dropped == 0
    await redis.aclose()


async def _read_or_none(sink: RedisAuditSink, ns: str) -> object:
    try:
        return await sink.read(ns)
    except StoreUnavailable:
        return None


def test_compact_stores_the_shared_attribution_once_and_reads_back_every_record() -> None:
    bob, alice = make_context("n"), make_context("n")
    alice = alice.model_copy(update={"actor": agent("alice")})
    events = [audit_event(bob, "message.accepted", "succeeded", id="e-1", message_id="m-1"),
              audit_event(bob, "message.sent", "succeeded", id="e-2", message_id="m-1"),
              audit_event(alice, "turn.ended", "failed", id="e-3", reason="x",
                          metadata={"a": None, "b": [1, None]})]
    fields = compact(events)
    assert fields[::2] == ["h", "e", "e2", "e3"]
    head, first, second, third = (json.loads(value) for value in fields[1::2])
    assert head["actor"] == {"kind": "agent", "agentId": "bob"}
    assert "actor" not in first and "actor" not in second  # shared, stored once
    assert third["actor"] == {"kind": "agent", "agentId": "alice"}  # its own attribution
    assert decode_entry(dict(zip(fields[::2], fields[1::2], strict=True))) == events
    assert compact(events[:1]) == audit_fields(events[0])  # a lone record stays whole


async def test_records_written_together_share_one_entry(redis: Redis, ns: str) -> None:
    sink = RedisAuditSink(redis, linger_s=0.01)
    events = [audit_event(make_context(ns), "message.accepted", "succeeded", id=f"e-{i}")
              for i in range(3)]
    try:
        async with anyio.create_task_group() as tg:
            await tg.start(sink.run)
            for event in events:
                assert sink.record_later(event)
            sink.stop()
        assert await redis.xlen(Keys(ns).audit) == 1
        assert [e for _, e in await sink.read(ns)] == events
    finally:
        await drop_namespace(redis, ns)
