"""The marker scripts (claim_turn, renew_lease, settle_reply, settle_failure, marker_*),
called through MarkerStore, on fakeredis and real Redis."""

from __future__ import annotations

from typing import Any

import pytest
from redis.asyncio import Redis

from sharedos_redis.kernel.contracts import AuditEvent, agent, human
from sharedos_redis.store.audit import RedisAuditSink
from sharedos_redis.store.keys import RELAY_GROUP, Keys
from sharedos_redis.store.markers import MarkerStore, OpenScan, Settlement

from ..router.router_support import (
    Keyspace,
    make_context,
    make_reply,
    make_request,
    now_ms,
    put_marker,
    state_of,
)

pytestmark = pytest.mark.anyio


class Clock:
    def __init__(self) -> None:
        self.ms = now_ms()

    def __call__(self) -> int:
        return self.ms


async def audit(redis: Redis, ns: str) -> list[AuditEvent]:
    return [event for _, event in await RedisAuditSink(redis).read(ns)]


async def settled_entries(redis: Redis, ns: str) -> list[dict[str, str]]:
    return [{k.decode(): v.decode() for k, v in fields.items()}
            for _, fields in await redis.xrange(Keys(ns).settled)]


async def open_marker(redis: Redis, ns: str, mid: str = "m-1", **kw: Any) -> Any:
    context = make_context(ns)
    request = make_request(context, id=mid)
    await put_marker(redis, context, request, deadline_ms=kw.pop("deadline_ms", now_ms() + 30_000),
                     **kw)
    return request


async def test_each_mismatch_is_refused_and_the_right_reply_settles(
        redis: Redis, ns: str, keyspace: Keyspace) -> None:
    markers = MarkerStore(redis, retention_s=60)
    request = await open_marker(redis, ns)
    other = make_request(make_context(ns, actor=agent("carol")), id="m-2", receiver=agent("dave"))
    await put_marker(redis, make_context(ns, actor=agent("carol")), other,
                     deadline_ms=now_ms() + 30_000)
    forged = [
        ("unknown_request", None, make_reply(request, reply_to="m-404")),
        ("reply_mismatch", "sender", make_reply(request, reply_to="m-2")),  # another request
        ("reply_mismatch", "sender", make_reply(request, sender=agent("mallory"))),
        ("reply_mismatch", "receiver", make_reply(request, receiver=human("bob"))),
        ("reply_mismatch", "purpose", make_reply(request, purpose="exfiltrate")),
        ("reply_mismatch", "trace_id", make_reply(request, trace_id="trace-2")),
        ("reply_mismatch", "reply_to", make_reply(request, reply_to=None)),
    ]
    for code, cause, reply in forged:
        result = await markers.settle_reply(ns, reply)
        assert (result.settled, result.code, result.cause) == (False, code, cause)
    assert await state_of(redis, ns, "m-1") == "accepted"
    assert await state_of(redis, ns, "m-2") == "accepted"
    assert await settled_entries(redis, ns) == []

    right = make_reply(request)
    assert await markers.settle_reply(ns, right) == Settlement(True, "settled", "replied")
    key = Keys(ns).message("m-1")
    assert (await redis.hget(key, "reply")).decode() == right.to_json()
    assert 0 < await redis.pttl(key) <= 60_000
    assert await redis.zrange(Keys(ns).open, 0, -1) == [b"m-2"]
    # the reply is stored once, in the marker; the settlement entry only wakes the waiter
    assert await settled_entries(redis, ns) == [{"id": "m-1", "state": "replied"}]
    events = await audit(redis, ns)
    refused = [(e.reason, e.cause) for e in events if e.type == "reply.refused"]
    assert refused == [(code, cause) for code, cause, _ in forged]
    settled = [e for e in events if e.type == "reply.settled"]
    assert [(e.message_id, e.actor, e.trace_id) for e in settled] == [
        ("m-1", agent("bob"), "trace-1")]
    assert await keyspace() == {key, Keys(ns).message("m-2"), Keys(ns).open, Keys(ns).settled,
                                Keys(ns).audit}


async def test_terminal_states_never_change(redis: Redis, ns: str, keyspace: Keyspace) -> None:
    markers = MarkerStore(redis)
    replied = await open_marker(redis, ns, "m-1")
    failed = await open_marker(redis, ns, "m-2")
    first = make_reply(replied)
    assert (await markers.settle_reply(ns, first)).settled
    assert (await markers.settle_failure(ns, "m-2", state="failed", code="runtime_failed")).settled

    second = make_reply(replied, id="r-again", payload={"answer": "changed"})
    assert await markers.settle_reply(ns, second) == Settlement(
        False, "request_closed", "replied", "replied")
    for state in ("failed", "timed_out", "cancelled", "dead"):
        late = await markers.settle_failure(ns, "m-1", state=state, code="request_timed_out")
        assert (late.settled, late.code, late.state) == (False, "request_closed", "replied")
    assert await markers.settle_reply(ns, make_reply(failed)) == Settlement(
        False, "request_closed", "failed", "failed")
    assert not (await markers.settle_failure(ns, "m-2", state="cancelled", code="x")).settled

    assert (await redis.hget(Keys(ns).message("m-1"), "reply")).decode() == first.to_json()
    assert await redis.hmget(Keys(ns).message("m-2"), ["state", "code", "reply"]) == [
        b"failed", b"runtime_failed", None]
    assert len(await settled_entries(redis, ns)) == 2
    assert await markers.settle_failure(ns, "m-404", state="failed", code="x") == Settlement(
        False, "unknown_request", None)
    await keyspace()


async def test_late_reply_after_timeout_is_refused(redis: Redis, ns: str,
                                                   keyspace: Keyspace) -> None:
    clock = Clock()
    markers = MarkerStore(redis, clock_ms=clock)
    request = await open_marker(redis, ns, deadline_ms=clock.ms + 1000)
    assert await markers.overdue(ns) == []
    clock.ms += 1000
    assert await markers.overdue(ns) == ["m-1"]
    assert (await markers.settle_failure(ns, "m-1", state="timed_out",
                                         code="request_timed_out")).settled
    assert await markers.overdue(ns) == []
    late = await markers.settle_reply(ns, make_reply(request))
    assert (late.settled, late.code, late.cause) == (False, "request_closed", "timed_out")
    assert await settled_entries(redis, ns) == [
        {"id": "m-1", "state": "timed_out", "result": "request_timed_out"}]
    await keyspace()


async def test_a_reply_in_another_namespace_cannot_settle(redis: Redis, ns: str,
                                                          keyspace: Keyspace) -> None:
    markers = MarkerStore(redis)
    request = await open_marker(redis, ns)
    other_ns = f"{ns}-b"
    try:
        refused = await markers.settle_reply(other_ns, make_reply(request))
        assert (refused.settled, refused.code) == (False, "unknown_request")
        assert await state_of(redis, ns, "m-1") == "accepted"
        assert not await redis.exists(Keys(other_ns).settled)
        [event] = await audit(redis, other_ns)
        assert (event.type, event.reason, event.namespace_id) == (
            "reply.refused", "unknown_request", other_ns)
    finally:
        await redis.delete(Keys(other_ns).audit)
    assert (await markers.settle_reply(ns, make_reply(request))).settled
    await keyspace()


async def test_claim_busy_expiry_renew_and_dead_letter(redis: Redis, ns: str,
                                                       keyspace: Keyspace) -> None:
    clock = Clock()
    markers = MarkerStore(redis, clock_ms=clock)
    request = await open_marker(redis, ns)

    first = await markers.claim_turn(ns, "m-1", lease_ms=1000, max_attempts=2, worker="w1")
    assert (first.outcome, first.attempt, first.request) == ("claimed", 1, request)
    assert not hasattr(first, "requester_context")  # the requester's context stays in Redis
    busy = await markers.claim_turn(ns, "m-1", lease_ms=1000, max_attempts=2, worker="w2")
    assert (busy.outcome, busy.attempt, busy.request) == ("busy", 1, None)
    clock.ms += 500
    assert await markers.renew_lease(ns, "m-1", lease_ms=1000, attempt=1)
    clock.ms += 999
    assert await markers.expired_leases(ns) == []
    assert (await markers.claim_turn(ns, "m-1", lease_ms=1000, max_attempts=2,
                                     worker="w2")).outcome == "busy"
    clock.ms += 1
    assert await markers.expired_leases(ns) == ["m-1"]
    second = await markers.claim_turn(ns, "m-1", lease_ms=1000, max_attempts=2, worker="w2")
    assert (second.outcome, second.attempt) == ("claimed", 2)
    assert not await markers.renew_lease(ns, "m-1", lease_ms=1000, attempt=1)  # the old worker
    clock.ms += 1000
    dead = await markers.claim_turn(ns, "m-1", lease_ms=1000, max_attempts=2, worker="w3")
    assert (dead.outcome, dead.attempt, dead.request) == ("dead", 2, None)
    assert await redis.hmget(Keys(ns).message("m-1"), ["state", "code", "lease"]) == [
        b"dead", b"request_dead_lettered", None]
    assert await markers.expired_leases(ns) == [] and await markers.overdue(ns) == []
    [letter] = await markers.dead_letters(ns)
    assert (letter["id"], letter["reason"]) == ("m-1", "request_dead_lettered")
    assert await settled_entries(redis, ns) == [
        {"id": "m-1", "state": "dead", "result": "request_dead_lettered"}]
    closed = await markers.claim_turn(ns, "m-1", lease_ms=1000, max_attempts=9, worker="w4")
    assert closed.outcome == "closed"
    missing = await markers.claim_turn(ns, "m-404", lease_ms=1000, max_attempts=2, worker="w")
    assert missing.outcome == "missing"
    types = [e.type for e in await audit(redis, ns)]
    assert types == ["turn.started", "turn.started", "request.dead_lettered"]
    k = Keys(ns)
    assert await keyspace() == {k.message("m-1"), k.settled, k.audit, k.dead}  # leases emptied


async def test_redrive_brings_a_dead_letter_back(redis: Redis, ns: str,
                                                 keyspace: Keyspace) -> None:
    markers = MarkerStore(redis)
    await open_marker(redis, ns)
    assert await markers.redrive(ns, "m-1", deadline_ms=now_ms() + 5000,
                                 trace_id="trace-1") == "closed"  # not dead
    assert (await markers.settle_failure(ns, "m-1", state="dead", code="recipient_unknown")).settled
    [letter] = await markers.dead_letters(ns)
    assert letter["reason"] == "recipient_unknown"
    deadline = now_ms() + 5000
    assert await markers.redrive(ns, "m-1", deadline_ms=deadline, trace_id="trace-1",
                                 default_hops=3) == "redriven"
    assert await redis.get(Keys(ns).budget("trace-1")) == b"2"  # a re-drive is a hop
    fields = ["state", "attempts", "deadline", "code"]
    assert await redis.hmget(Keys(ns).message("m-1"), fields) == [
        b"accepted", b"0", str(deadline).encode(), None]
    assert await redis.zscore(Keys(ns).open, "m-1") == deadline
    [(_, entry)] = await redis.xrange(Keys(ns).outbox)
    assert entry == {b"id": b"m-1"}
    claim = await markers.claim_turn(ns, "m-1", lease_ms=1000, max_attempts=1, worker="w")
    assert (claim.outcome, claim.attempt) == ("claimed", 1)
    assert [e.type for e in await audit(redis, ns)][-3:] == [
        "request.dead_lettered", "request.redriven", "turn.started"]
    assert await markers.redrive(ns, "m-404", deadline_ms=deadline,
                                 trace_id="trace-1") == "closed"
    await keyspace()


async def test_redrive_spends_a_hop_and_refuses_an_exhausted_trace(
        redis: Redis, ns: str, keyspace: Keyspace) -> None:
    markers, k = MarkerStore(redis), Keys(ns)
    await open_marker(redis, ns)
    await markers.settle_failure(ns, "m-1", state="dead", code="recipient_unknown")
    await redis.set(k.budget("trace-1"), 0)
    await redis.hset(k.usage, "g-1", 1)
    status = await markers.redrive(ns, "m-1", deadline_ms=now_ms() + 5000, trace_id="trace-1",
                                   released=("g-1", ("e", "released")))
    assert status == "budget_exhausted"
    assert await redis.hget(k.message("m-1"), "state") == b"dead"  # nothing moved
    assert await redis.hget(k.usage, "g-1") == b"0"  # the reserved use is given back
    [(_, last)] = await redis.xrevrange(k.audit, count=1)
    assert last == {b"e": b"released"}


async def test_scan_open_lists_markers_stuck_in_a_state(redis: Redis, ns: str,
                                                    keyspace: Keyspace) -> None:
    clock = Clock()
    markers = MarkerStore(redis, clock_ms=clock)
    await open_marker(redis, ns, "m-1", state="dispatched")
    await open_marker(redis, ns, "m-2", state="accepted")
    assert await markers.scan_open(ns, older_than_ms={"dispatched": 1000}) == OpenScan([], None)
    clock.ms += 2000
    assert (await markers.scan_open(ns, older_than_ms={"dispatched": 1000})).stale == ["m-1"]
    assert (await markers.scan_open(ns, older_than_ms={"accepted": 1000})).stale == ["m-2"]
    both = await markers.scan_open(ns, older_than_ms={"accepted": 1000, "dispatched": 1000})
    assert sorted(both.stale) == ["m-1", "m-2"]
    first = await markers.scan_open(ns, older_than_ms={"accepted": 1000}, count=1)
    assert first.next_start == 1  # a full slice: the sweep goes on at rank 1
    rest = await markers.scan_open(ns, older_than_ms={"accepted": 1000}, start=1, count=1)
    assert sorted([*first.stale, *rest.stale]) == ["m-2"] and rest.next_start == 2
    assert (await markers.scan_open(ns, older_than_ms={}, start=2, count=1)).next_start is None
    await keyspace()


async def test_every_script_audit_record_is_a_valid_event(redis: Redis, ns: str,
                                                          keyspace: Keyspace) -> None:
    markers = MarkerStore(redis)
    request = await open_marker(redis, ns, "m-1")
    await open_marker(redis, ns, "m-2")
    await markers.claim_turn(ns, "m-1", lease_ms=1000, max_attempts=3, worker="w/1 é")
    await markers.settle_reply(ns, make_reply(request, purpose="wrong"))
    await markers.settle_reply(ns, make_reply(request))
    await markers.settle_failure(ns, "m-2", state="cancelled", code="request_cancelled")
    await markers.settle_reply(ns, make_reply(request, reply_to="m-2"))
    events = await audit(redis, ns)  # parses every record strictly
    assert [(e.type, e.outcome, e.reason) for e in events] == [
        ("turn.started", "succeeded", None),
        ("reply.refused", "denied", "reply_mismatch"),
        ("reply.settled", "succeeded", None),
        ("request.cancelled", "failed", "request_cancelled"),
        ("reply.refused", "denied", "request_closed"),
    ]
    assert events[0].metadata == {"worker": "w/1 é", "attempt": 1}
    assert {e.namespace_id for e in events} == {ns}
    await keyspace()


async def test_a_claim_handed_over_by_the_relay_retires_its_outbox_entry_in_the_same_step(
        redis: Redis, ns: str, keyspace: Keyspace) -> None:
    markers, k = MarkerStore(redis), Keys(ns)
    request = await open_marker(redis, ns)
    await redis.xgroup_create(k.outbox, RELAY_GROUP, id="0", mkstream=True)
    first = (await redis.xadd(k.outbox, {"id": "m-1"})).decode()
    again = (await redis.xadd(k.outbox, {"id": "m-1"})).decode()  # a re-wake of the same turn
    await redis.xreadgroup(RELAY_GROUP, "w1", {k.outbox: ">"})  # both pending in the relay

    claim = await markers.claim_turn(ns, "m-1", lease_ms=10_000, max_attempts=3, worker="w1",
                                     relayed=first)
    busy = await markers.claim_turn(ns, "m-1", lease_ms=10_000, max_attempts=3, worker="w2",
                                    relayed=again)

    assert (claim.outcome, claim.request, busy.outcome) == ("claimed", request, "busy")
    assert await redis.xlen(k.outbox) == 0  # both retired, the busy one too
    assert (await redis.xpending(k.outbox, RELAY_GROUP))["pending"] == 0
    records = await audit(redis, ns)
    assert [(e.type, e.actor) for e in records] == [
        ("message.dispatched", agent("bob")), ("turn.started", agent("bob"))]
    assert len(await redis.xrange(k.audit)) == 1  # one entry for the claim's two records
    assert await state_of(redis, ns, "m-1") == "running"
