"""forget_missing and every marker call that meets a vanished record, through MarkerStore,
on fakeredis and real Redis: the id leaves every index once, with one dead letter and
one settlement entry; live records and ids no index holds are never touched."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from redis.asyncio import Redis

from sharedos_redis.store.keys import Keys
from sharedos_redis.store.markers import MarkerStore, OpenScan, Settlement, TurnClaim

from ..router.router_support import Keyspace, make_context, make_reply, now_ms, put_marker
from .test_marker_scripts import open_marker, settled_entries

pytestmark = pytest.mark.anyio


async def vanish(redis: Redis, ns: str, mid: str, *, leased: bool = True) -> None:
    """The record of ``mid`` expires while open (and, if ``leased``, while running)."""
    k = Keys(ns)
    if leased:
        await redis.zadd(k.leases, {mid: now_ms() + 60_000})
    await redis.delete(k.message(mid))


async def test_forget_removes_only_vanished_indexed_ids_once(redis: Redis, ns: str,
                                                             keyspace: Keyspace) -> None:
    markers, k = MarkerStore(redis), Keys(ns)
    await open_marker(redis, ns, "live")
    await open_marker(redis, ns, "gone")
    await vanish(redis, ns, "gone")
    assert await markers.forget(ns, ["live", "gone", "never-indexed"]) == ["gone"]
    assert await markers.forget(ns, ["gone"]) == []  # idempotent: recorded once
    assert [m.decode() for m in await redis.zrange(k.open, 0, -1)] == ["live"]
    letters = await markers.dead_letters(ns)
    assert [(d["id"], d["reason"]) for d in letters] == [("gone", "request_expired")]
    assert await settled_entries(redis, ns) == [
        {"id": "gone", "state": "expired", "result": "request_expired"}]
    assert await keyspace() == {k.message("live"), k.open, k.settled, k.dead}  # leases emptied


Call = Callable[[MarkerStore, str, str], Awaitable[Any]]


def summary(result: Any) -> Any:
    """What a call answered: the claim outcome, the settlement code, the stale ids, or itself."""
    if isinstance(result, TurnClaim):
        return result.outcome
    if isinstance(result, Settlement):
        return result.code
    return result.stale if isinstance(result, OpenScan) else result


@pytest.mark.parametrize(("call", "answer"), [
    pytest.param(lambda m, ns, mid: m.claim_turn(ns, mid, lease_ms=1000, max_attempts=3,
                                                 worker="w"), "missing", id="claim_turn"),
    pytest.param(lambda m, ns, mid: m.renew_lease(ns, mid, lease_ms=1000, attempt=1), False,
                 id="renew_lease"),
    pytest.param(lambda m, ns, mid: m.settle_failure(ns, mid, state="failed",
                                                     code="runtime_failed"),
                 "unknown_request", id="settle_failure"),
    pytest.param(lambda m, ns, mid: m.overdue(ns), [], id="overdue"),
    pytest.param(lambda m, ns, mid: m.expired_leases(ns), [], id="expired_leases"),
    pytest.param(lambda m, ns, mid: m.scan_open(ns, older_than_ms={"accepted": 0}), [],
                 id="scan_open"),
])
async def test_each_index_read_and_transition_forgets_a_vanished_record(
        redis: Redis, ns: str, keyspace: Keyspace, call: Call, answer: Any) -> None:
    k = Keys(ns)
    await open_marker(redis, ns, "gone", deadline_ms=now_ms() - 1000)  # overdue too
    await redis.zadd(k.leases, {"gone": now_ms() - 1000})  # and its lease expired
    await redis.delete(k.message("gone"))
    markers = MarkerStore(redis)
    assert summary(await call(markers, ns, "gone")) == answer
    letters = await markers.dead_letters(ns)
    assert [(d["id"], d["reason"]) for d in letters] == [("gone", "request_expired")]
    assert await keyspace() == {k.settled, k.dead}  # open and leases are empty


async def test_a_reply_to_a_vanished_request_forgets_it(redis: Redis, ns: str,
                                                        keyspace: Keyspace) -> None:
    context = make_context(ns)
    request = await open_marker(redis, ns, "gone")
    await vanish(redis, ns, "gone")
    markers, k = MarkerStore(redis), Keys(ns)
    refused = await markers.settle_reply(ns, make_reply(request))
    assert (refused.settled, refused.code) == (False, "unknown_request")
    assert [d["id"] for d in await markers.dead_letters(ns)] == ["gone"]
    assert await keyspace() == {k.settled, k.dead, k.audit}  # audit: the reply.refused record
    await put_marker(redis, context, request)  # a live record is never forgotten
    assert await markers.forget(ns, ["gone"]) == []
