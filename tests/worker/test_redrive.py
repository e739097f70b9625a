"""Re-driving a dead letter re-authorizes its sender and spends a hop (the attacker's side).

Runs on fakeredis and on real Redis (REDIS_URL).
"""

from __future__ import annotations

from typing import Any

import pytest
from redis.asyncio import Redis

from sharedos_redis.kernel.contracts import CapabilityGrant, agent, format_timestamp
from sharedos_redis.store.audit import RedisAuditSink
from sharedos_redis.store.grants import RedisGrantStore
from sharedos_redis.store.keys import Keys
from sharedos_redis.store.markers import MarkerStore
from sharedos_redis.store.usage import RedisGrantUsageStore
from sharedos_redis.transport import RedisStreamTransport
from sharedos_redis.worker.redrive import redrive_request

from ..support import make_context, make_envelope

pytestmark = [pytest.mark.anyio, pytest.mark.usefixtures("served")]  # no worker runs



def _send(ns: str, **constraints: Any) -> CapabilityGrant:
    return CapabilityGrant.from_wire({
        "id": "g-send", "namespaceId": ns, "subject": agent("bob").to_wire(),
        "issuer": agent("host").to_wire(),
        "capabilities": [{"resource": {"namespace": "sharedos.messaging",
                                       "path": ["agent", "alice"]},
                          "actions": ["send"], "scope": "exact"}],
        "constraints": constraints, "issuedAt": "2026-01-01T00:00:00Z"})


async def _dead_letter(redis: Redis, ns: str, **constraints: Any) -> RedisGrantStore:
    grants = RedisGrantStore(redis)
    await grants.put(_send(ns, **constraints))
    ctx = make_context(ns)
    assert (await RedisStreamTransport(redis).deliver(ctx, make_envelope(ctx))).status == (
        "accepted")
    await MarkerStore(redis).settle_failure(ns, "m-1", state="dead", code="recipient_unknown")
    return grants


async def _state(redis: Redis, ns: str) -> bytes | None:
    value: bytes | None = await redis.hget(Keys(ns).message("m-1"), "state")
    return value


async def test_a_redrive_is_authorized_and_spends_a_hop_and_a_use(
        redis: Redis, ns: str, cleanup: None) -> None:
    await _dead_letter(redis, ns, maxUses=5)
    hops = int(await redis.get(Keys(ns).budget("trace-1")))
    outcome = await redrive_request(redis, ns, "m-1", timeout_s=30)
    assert outcome.redriven and await _state(redis, ns) == b"accepted"
    assert int(await redis.get(Keys(ns).budget("trace-1"))) == hops - 1
    assert await RedisGrantUsageStore(redis).used(ns, "g-send") == 1
    again = await redrive_request(redis, ns, "m-1", timeout_s=30)
    assert (again.redriven, again.code) == (False, "not_dead_letter")


async def test_a_revoked_sender_cannot_be_redriven(redis: Redis, ns: str, cleanup: None) -> None:
    grants = await _dead_letter(redis, ns)
    await grants.revoke(ns, agent("bob"), "g-send", format_timestamp())
    outcome = await redrive_request(redis, ns, "m-1", timeout_s=30)
    assert (outcome.redriven, outcome.code) == (False, "no_matching_grant")
    assert await _state(redis, ns) == b"dead"
    events = [e for _, e in await RedisAuditSink(redis).read(ns)]
    assert events[-1].type == "authorization.checked" and events[-1].operation_id == "m-1"


async def test_an_exhausted_grant_or_trace_refuses_and_keeps_the_use(
        redis: Redis, ns: str, cleanup: None) -> None:
    await _dead_letter(redis, ns, maxUses=1)
    await redis.set(Keys(ns).budget("trace-1"), 0)
    outcome = await redrive_request(redis, ns, "m-1", timeout_s=30)
    assert (outcome.redriven, outcome.code) == (False, "budget_exhausted")
    assert await RedisGrantUsageStore(redis).used(ns, "g-send") == 0  # given back
    types = [e.type for _, e in await RedisAuditSink(redis).read(ns)]
    assert types[-2:] == ["grant.usage.released", "message.refused"]
    await redis.set(Keys(ns).budget("trace-1"), 5)
    assert (await redrive_request(redis, ns, "m-1", timeout_s=30)).redriven
    await MarkerStore(redis).settle_failure(ns, "m-1", state="dead", code="recipient_unknown")
    spent = await redrive_request(redis, ns, "m-1", timeout_s=30)
    assert (spent.redriven, spent.code) == (False, "grant_exhausted")
