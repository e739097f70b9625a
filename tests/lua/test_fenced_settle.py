"""Fenced settlements: a turn's settle carries its attempt and is refused atomically,
``turn_lease_lost``, once another attempt runs the request or it ended; the refusal is
audited (ADR 0023). Unfenced settlements (cancel, timeouts) are unchanged. On fakeredis
and real Redis."""

from __future__ import annotations

import pytest
from redis.asyncio import Redis

from sharedos_redis.store.keys import Keys
from sharedos_redis.store.markers import MarkerStore, Settlement

from ..router.router_support import make_reply, state_of
from .test_marker_scripts import Clock, audit, open_marker, settled_entries

pytestmark = pytest.mark.anyio


async def _two_attempts(redis: Redis, ns: str) -> tuple[MarkerStore, Clock]:
    """m-1 claimed by attempt 1, its lease expired, re-claimed by attempt 2."""
    clock = Clock()
    markers = MarkerStore(redis, clock_ms=clock)
    for attempt in (1, 2):
        claim = await markers.claim_turn(ns, "m-1", lease_ms=1000, max_attempts=3,
                                         worker=f"w{attempt}")
        assert (claim.outcome, claim.attempt) == ("claimed", attempt)
        clock.ms += 1000
    clock.ms -= 1000  # attempt 2's lease is live
    return markers, clock


async def test_a_stale_attempts_reply_is_refused_and_audited(redis: Redis, ns: str) -> None:
    request = await open_marker(redis, ns)
    markers, _ = await _two_attempts(redis, ns)
    stale = await markers.settle_reply(ns, make_reply(request, payload={"by": 1}), attempt=1)
    assert stale == Settlement(False, "turn_lease_lost", "running", "attempt")
    assert await state_of(redis, ns, "m-1") == "running"
    assert await settled_entries(redis, ns) == []
    assert await markers.holds_lease(ns, "m-1", 2) and not await markers.holds_lease(ns, "m-1", 1)

    live = await markers.settle_reply(ns, make_reply(request, payload={"by": 2}), attempt=2)
    assert live == Settlement(True, "settled", "replied")
    late = await markers.settle_reply(ns, make_reply(request, payload={"by": 1}), attempt=1)
    assert late == Settlement(False, "turn_lease_lost", "replied", "attempt")
    assert b'"by":2' in await redis.hget(Keys(ns).message("m-1"), "reply")
    assert not await markers.holds_lease(ns, "m-1", 2)
    refused = [(e.type, e.reason, e.cause, e.message_id, e.actor.id, e.metadata)
               for e in await audit(redis, ns) if e.type == "reply.refused"]
    # attributed to the stored requester context, like every settlement record
    fence = {"attempt": 1, "currentAttempt": 2}
    assert refused == [("reply.refused", "turn_lease_lost", "attempt", "m-1", "bob", fence),
                       ("reply.refused", "turn_lease_lost", "attempt", "m-1", "bob", fence)]


async def test_a_stale_attempts_failure_is_refused_and_an_unfenced_one_settles(
        redis: Redis, ns: str) -> None:
    await open_marker(redis, ns)
    markers, _ = await _two_attempts(redis, ns)
    stale = await markers.settle_failure(ns, "m-1", state="failed",
                                         code="recipient_turn_failed", attempt=1)
    assert stale == Settlement(False, "turn_lease_lost", "running", "attempt")
    assert await state_of(redis, ns, "m-1") == "running"
    # the router's cancel and the reconciler's timeouts carry no token: they always settle
    cancel = await markers.settle_failure(ns, "m-1", state="cancelled", code="request_cancelled")
    assert cancel == Settlement(True, "settled", "cancelled")
    assert await settled_entries(redis, ns) == [
        {"id": "m-1", "state": "cancelled", "result": "request_cancelled"}]
    types = [(e.type, e.reason, e.cause, e.metadata) for e in await audit(redis, ns)
             if e.type != "turn.started"]
    assert types == [("reply.refused", "turn_lease_lost", "attempt",
                      {"attempt": 1, "currentAttempt": 2}),
                     ("request.cancelled", "request_cancelled", None, None)]


async def test_a_fenced_settle_of_a_request_not_running_is_refused(
        redis: Redis, ns: str) -> None:
    request = await open_marker(redis, ns)  # accepted: no attempt holds it
    markers = MarkerStore(redis)
    refused = await markers.settle_reply(ns, make_reply(request), attempt=1)
    assert refused == Settlement(False, "turn_lease_lost", "accepted", "accepted")
    too_large = MarkerStore(redis, max_reply_bytes=4)
    big = await too_large.settle_reply(ns, make_reply(request, payload="x" * 10), attempt=1)
    assert (big.settled, big.code) == (False, "turn_lease_lost")
    assert await state_of(redis, ns, "m-1") == "accepted"
    missing = await markers.settle_failure(ns, "m-404", state="failed", code="x", attempt=1)
    assert missing.code == "unknown_request"  # nothing to fence: nothing recorded either
    assert [e.cause for e in await audit(redis, ns)] == ["accepted", "accepted"]


async def test_a_request_that_ended_under_the_attempt_names_its_state(
        redis: Redis, ns: str) -> None:
    request = await open_marker(redis, ns)
    markers = MarkerStore(redis)
    await markers.claim_turn(ns, "m-1", lease_ms=5000, max_attempts=3, worker="w1")
    assert (await markers.settle_failure(ns, "m-1", state="cancelled",
                                         code="request_cancelled")).settled
    refused = await markers.settle_reply(ns, make_reply(request), attempt=1)
    assert refused == Settlement(False, "turn_lease_lost", "cancelled", "cancelled")


async def test_the_lease_holder_settles_even_after_its_lease_expired_unclaimed(
        redis: Redis, ns: str) -> None:
    request = await open_marker(redis, ns)
    clock = Clock()
    markers = MarkerStore(redis, clock_ms=clock)
    await markers.claim_turn(ns, "m-1", lease_ms=1000, max_attempts=3, worker="w1")
    clock.ms += 5000  # expired, but no other attempt took it: the token still holds
    settled = await markers.settle_reply(ns, make_reply(request), attempt=1)
    assert settled == Settlement(True, "settled", "replied")
