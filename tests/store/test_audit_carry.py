"""A settlement script carries the audit records its process has queued for the namespace
(one round trip instead of two, in order ahead of its own record); on failure they are
queued again, never lost."""

from __future__ import annotations

from typing import Any

import anyio
import pytest
from redis.asyncio import Redis

from sharedos_redis.errors import StoreUnavailable
from sharedos_redis.kernel.audit import audit_event
from sharedos_redis.kernel.contracts import agent
from sharedos_redis.store.audit import RedisAuditSink
from sharedos_redis.store.keys import Keys
from sharedos_redis.store.markers import MarkerStore
from sharedos_redis.store.scripts import Scripts

from ..router.router_support import make_reply, make_request, now_ms, put_marker
from ..support import make_context

pytestmark = pytest.mark.anyio


async def test_a_settlement_writes_the_queued_records_first(redis: Redis, ns: str) -> None:
    context = make_context(ns)
    request = make_request(context)
    await put_marker(redis, context, request, deadline_ms=now_ms() + 30_000)
    sink = RedisAuditSink(redis, linger_s=30)  # the writer would wait: only the script writes
    markers = MarkerStore(redis, audit=sink)
    async with anyio.create_task_group() as tg:
        await tg.start(sink.run)
        for kind in ("turn.admitted", "turn.ended"):
            assert sink.record_later(audit_event(context, kind, "succeeded"))
        assert (await markers.settle_reply(ns, make_reply(request))).settled
        types = [e.type for _, e in await sink.read(ns)]
        assert types == ["turn.admitted", "turn.ended", "reply.settled"]
        assert sink.take_queued(ns) == []
        sink.stop()
        tg.cancel_scope.cancel()


async def test_a_failed_settlement_queues_the_records_again(
        redis: Redis, ns: str, monkeypatch: pytest.MonkeyPatch) -> None:
    context = make_context(ns)
    sink = RedisAuditSink(redis)  # no writer running: records wait for the next write
    event = audit_event(context, "turn.ended", "succeeded")
    sink._pending.append(event)

    async def broken(self: Scripts, name: str, keys: Any, args: Any) -> Any:
        raise StoreUnavailable(name, "down")

    monkeypatch.setattr(Scripts, "call", broken)
    with pytest.raises(StoreUnavailable):
        await MarkerStore(redis, audit=sink).settle_failure(ns, "m-1", state="failed",
                                                            code="x")
    assert sink.take_queued(ns) == [event]


async def test_the_script_writes_its_records_as_one_entry_each_with_its_own_attribution(
        redis: Redis, ns: str) -> None:
    context = make_context(ns)  # the requester
    recipient = make_context(ns, agent("alice"), purpose="other")  # the turn that replied
    request = make_request(context)
    await put_marker(redis, context, request, deadline_ms=now_ms() + 30_000)
    sink = RedisAuditSink(redis, linger_s=30)
    markers = MarkerStore(redis, audit=sink)
    async with anyio.create_task_group() as tg:
        await tg.start(sink.run)
        carried = [audit_event(recipient, kind, "succeeded", metadata={"turnId": "t-1"})
                   for kind in ("turn.admitted", "turn.ended")]
        for event in carried:
            assert sink.record_later(event)
        assert (await markers.settle_reply(ns, make_reply(request))).settled
        [(_, fields)] = await redis.xrange(Keys(ns).audit)
        assert [name.decode() for name in fields] == ["h", "e", "e2", "e3"]  # one XADD
        assert b"alice" in fields[b"h"] and b"alice" not in fields[b"e"]  # stored once
        events = [e for _, e in await sink.read(ns)]
        assert events[:2] == carried  # each record whole again, field for field
        settled = events[2]
        assert (settled.type, settled.actor, settled.purpose) == (
            "reply.settled", context.actor, context.purpose)  # the requester's, not alice's
        sink.stop()
        tg.cancel_scope.cancel()
