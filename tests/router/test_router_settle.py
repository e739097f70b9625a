"""RedisRequestRouter's host-facing calls: settle_reply (dicts), cancel, pending, timeline."""

from __future__ import annotations

from typing import Any

import pytest
from redis.asyncio import Redis

from sharedos_redis.errors import UnknownMessage
from sharedos_redis.kernel.contracts import agent, human
from sharedos_redis.router import PendingRequest, RedisRequestRouter
from sharedos_redis.store.audit import RedisAuditSink
from sharedos_redis.store.keys import Keys
from sharedos_redis.store.markers import MarkerStore, Settlement

from .router_support import (
    Keyspace,
    make_context,
    make_reply,
    make_request,
    now_ms,
    put_marker,
    state_of,
)

pytestmark = pytest.mark.anyio


def _malformed(wire: dict[str, Any]) -> list[tuple[str, Any]]:
    extra = {**wire, "intent": "grant me admin"}
    missing = {k: v for k, v in wire.items() if k != "traceId"}
    old = {**wire, "version": "1"}
    snake = {**{k: v for k, v in wire.items() if k != "replyTo"}, "reply_to": wire["replyTo"]}
    bad_sender = {**wire, "sender": {"kind": "agent", "agentId": "alice", "admin": True}}
    return [("extra_forbidden", extra), ("missing", missing),
            ("unsupported_protocol_version", old), ("extra_forbidden", snake),
            ("extra_forbidden", bad_sender),
            ("unsupported_protocol_version", ["not", "an", "object"])]


async def test_malformed_replies_are_refused_and_audited(redis: Redis, ns: str,
                                                         keyspace: Keyspace) -> None:
    context = make_context(ns)
    request = make_request(context)
    await put_marker(redis, context, request, deadline_ms=now_ms() + 30_000)
    right = make_reply(request)
    router = RedisRequestRouter(redis)  # settle/inspect calls need no listener
    cases = _malformed(right.to_wire())
    for cause, wire in cases:
        result = await router.settle_reply(ns, wire)
        assert (result.settled, result.code, result.cause) == (
            False, "invalid_message_reply", cause), wire
    assert await state_of(redis, ns, request.id) == "accepted"
    assert await router.settle_reply(ns, right.to_wire()) == Settlement(True, "settled", "replied")
    events = [event for _, event in await RedisAuditSink(redis).read(ns)]
    refused = [(e.type, e.reason, e.cause, e.message_id) for e in events[:-1]]
    assert refused == [("reply.refused", "invalid_message_reply", cause,
                        wire.get("replyTo") if isinstance(wire, dict) else None)
                       for cause, wire in cases]
    assert events[-1].type == "reply.settled"
    await keyspace()


async def test_cancel_and_settle_failure_through_the_router(redis: Redis, ns: str,
                                                            keyspace: Keyspace) -> None:
    context = make_context(ns)
    first, second = make_request(context, id="m-1"), make_request(context, id="m-2")
    for request in (first, second):
        await put_marker(redis, context, request, deadline_ms=now_ms() + 30_000)
    router = RedisRequestRouter(redis)
    assert (await router.cancel(ns, "m-1")).state == "cancelled"
    assert (await router.cancel(ns, "m-1")).code == "request_closed"
    settled = await router.settle_failure(ns, "m-2", code="recipient_turn_failed")
    assert (settled.settled, settled.state) == (True, "failed")
    assert await redis.hget(Keys(ns).message("m-2"), "code") == b"recipient_turn_failed"
    await keyspace()


async def test_pending_lists_open_requests_with_filters(redis: Redis, ns: str,
                                                        keyspace: Keyspace) -> None:
    bob = make_context(ns)
    carol = make_context(ns, actor=human("carol x"), trace="trace-9", purpose="billing")
    deadline = now_ms() + 30_000
    await put_marker(redis, bob, make_request(bob, id="m-1"), deadline_ms=deadline)
    await put_marker(redis, carol, make_request(carol, id="m-2", receiver=agent("dan")),
                     deadline_ms=deadline + 1, state="dispatched")
    await put_marker(redis, bob, make_request(bob, id="m-3"), deadline_ms=deadline + 2)
    router = RedisRequestRouter(redis)
    await router.cancel(ns, "m-3")
    rows = await router.pending(ns)
    assert [r.id for r in rows] == ["m-1", "m-2"]
    second = rows[1]
    assert isinstance(second, PendingRequest)
    assert (second.sender, second.recipient, second.purpose, second.trace_id, second.state,
            second.deadline_ms, second.attempts) == (
        "human:carol x", "agent:dan", "billing", "trace-9", "dispatched", deadline + 1, 0)
    assert 0 <= second.age_s < 60
    assert [r.id for r in await router.pending(ns, state="dispatched")] == ["m-2"]
    assert [r.id for r in await router.pending(ns, agent="dan")] == ["m-2"]
    assert [r.id for r in await router.pending(ns, agent="bob")] == ["m-1"]
    assert await router.pending(ns, older_than_s=3600) == []
    assert [r.id for r in await router.pending(ns, limit=1)] == ["m-1"]
    await keyspace()


async def test_timeline_reads_one_requests_audit_events(redis: Redis, ns: str,
                                                        keyspace: Keyspace) -> None:
    context = make_context(ns)
    request = make_request(context)
    other = make_request(context, id="m-2")
    await put_marker(redis, context, request, deadline_ms=now_ms() + 30_000)
    await put_marker(redis, context, other, deadline_ms=now_ms() + 30_000)
    markers = MarkerStore(redis)
    await markers.claim_turn(ns, request.id, lease_ms=5000, max_attempts=3, worker="w")
    await markers.settle_reply(ns, make_reply(request, purpose="other"))
    await markers.settle_reply(ns, make_reply(request))
    await markers.settle_failure(ns, other.id, state="failed", code="runtime_failed")
    router = RedisRequestRouter(redis, markers=markers)
    timeline = await router.timeline(ns, request.id)
    assert [(e.type, e.reason) for e in timeline] == [
        ("turn.started", None), ("reply.refused", "reply_mismatch"), ("reply.settled", None)]
    with pytest.raises(UnknownMessage):
        await router.timeline(ns, "m-404")
    await keyspace()
