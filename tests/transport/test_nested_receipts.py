"""RedisStreamTransport.deliver inside a turn: the receipts of a nested accept, a
re-attach and the fenced and conflicting refusals (issue 12)."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from redis.asyncio import Redis

from sharedos_redis.kernel.contracts import (
    DeliveryAccepted,
    DeliveryDenied,
    MessageEnvelope,
    agent,
)
from sharedos_redis.kernel.usage import UseReservation, reserved_use
from sharedos_redis.store.audit import RedisAuditSink
from sharedos_redis.store.keys import Keys
from sharedos_redis.transport import RedisStreamTransport, TransportSettings
from sharedos_redis.transport.turn_scope import TurnScope, child_id, turn_scope

from ..support import Keyspace, make_context, make_envelope

pytestmark = [pytest.mark.anyio, pytest.mark.usefixtures("served")]  # no worker runs

NOW = datetime.now(UTC).replace(microsecond=0)
NOW_MS = int(NOW.timestamp() * 1000)
PARENT = "p-1"


async def test_nested_receipts_say_accepted_replayed_or_refused(
    redis: Redis, ns: str, keys: Keys, keyspace: Keyspace
) -> None:
    transport = RedisStreamTransport(redis, settings=TransportSettings(request_timeout_s=30),
                                     clock=lambda: NOW)
    alice = make_context(ns, agent("alice"))
    await redis.hset(keys.message(PARENT), mapping={"state": "running", "attempts": 1})
    first, second = TurnScope(ns, PARENT, 1), TurnScope(ns, PARENT, 2)
    child = child_id(PARENT, 1)

    def call(scope: TurnScope, payload: str = "q") -> MessageEnvelope:
        return make_envelope(alice, agent("carol"), id=scope.next_request_id(), payload=payload)

    with turn_scope(first):
        accepted = await transport.deliver(alice, call(first))
    await redis.hset(keys.message(PARENT), "attempts", 2)  # attempt 2 took the turn over
    await redis.hset(keys.usage, "g-1", 2)  # the first call's use and this call's reserved one
    reservation = UseReservation(ns, "g-1")
    token = reserved_use.set(reservation)
    try:
        with turn_scope(second):
            replayed = await transport.deliver(alice, call(second))
    finally:
        reserved_use.reset(token)
    with turn_scope(second):
        changed = call(TurnScope(ns, PARENT, 2), "other")  # the same position, k = 1
        conflict = await transport.deliver(alice, changed)
    with turn_scope(first):
        stale = await transport.deliver(alice, call(first))

    assert isinstance(accepted, DeliveryAccepted) and accepted.message_id == child
    assert accepted.metadata == {"deadlineMs": NOW_MS + 30_000, "hopsLeft": 15,
                                 "parent": PARENT, "attempt": 1}
    assert isinstance(replayed, DeliveryAccepted) and replayed.message_id == child
    assert replayed.metadata == {"deadlineMs": NOW_MS + 30_000, "replayed": True,
                                 "parent": PARENT, "attempt": 2}
    assert reservation.released and await redis.hget(keys.usage, "g-1") == b"1"
    for receipt, code in ((conflict, "replay_conflict"), (stale, "turn_lease_lost")):
        assert isinstance(receipt, DeliveryDenied) and receipt.error.code == code
    assert stale.message_id == child_id(PARENT, 2)
    events = [event for _, event in await RedisAuditSink(redis).read(ns)]
    assert [(e.type, e.message_id, e.reason) for e in events] == [
        ("message.accepted", child, None),
        ("grant.usage.released", child, "replay_attached"),
        ("message.replayed", child, None),
        ("message.refused", child, "replay_conflict"),
        ("message.refused", child_id(PARENT, 2), "turn_lease_lost")]
    assert events[2].metadata == {"state": "accepted", "attempt": 2}
    assert await redis.get(keys.budget("trace-1")) == b"15"
