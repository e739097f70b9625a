"""RedisStreamTransport.deliver: one atomic accept, refusals that write nothing, budgets."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from datetime import UTC, datetime

import anyio
import pytest
from redis.asyncio import Redis

from sharedos_redis.kernel.contracts import (
    AccessContext,
    AuditEvent,
    DeliveryAccepted,
    DeliveryDenied,
    DeliveryFailed,
    agent,
    group,
)
from sharedos_redis.kernel.ports import MessageTransport
from sharedos_redis.store.audit import RedisAuditSink
from sharedos_redis.store.budget import TraceBudget
from sharedos_redis.store.keys import MARKER_FIELDS, Keys, address_tag
from sharedos_redis.transport import RedisStreamTransport, TransportSettings, deadline_scope
from sharedos_redis.transport.transport import call_fingerprint

from ..support import Keyspace, make_context, make_envelope, scan_keyspace

pytestmark = pytest.mark.anyio

NOW = datetime.now(UTC).replace(microsecond=0)  # markers expire in real time
NOW_MS = int(NOW.timestamp() * 1000)


def _transport(redis: Redis, **settings: object) -> RedisStreamTransport:
    # no worker runs: the route check has its own tests (test_route_lease.py)
    settings.setdefault("route_check", False)
    return RedisStreamTransport(redis, settings=TransportSettings.model_validate(settings),
                                clock=lambda: NOW)


async def _events(redis: Redis, ns: str) -> list[AuditEvent]:
    return [event for _, event in await RedisAuditSink(redis).read(ns)]


async def test_accept_writes_marker_outbox_index_and_audit_only(
    redis: Redis, ns: str, keys: Keys, keyspace: Keyspace
) -> None:
    transport: MessageTransport = _transport(redis, request_timeout_s=30)
    ctx = make_context(ns)
    envelope = make_envelope(ctx)

    receipt = await transport.deliver(ctx, envelope)

    assert isinstance(receipt, DeliveryAccepted)
    assert receipt.message_id == "m-1"
    assert receipt.metadata == {"deadlineMs": NOW_MS + 30_000, "hopsLeft": 15}
    assert await keyspace() == {keys.message("m-1"), keys.budget("trace-1"), keys.open,
                                keys.outbox, keys.audit, keys.trace("trace-1")}
    marker = {k.decode(): v.decode() for k, v in (await redis.hgetall(keys.message("m-1"))).items()}
    assert set(marker) <= set(MARKER_FIELDS)
    assert marker == {
        "env": envelope.to_json(), "ctx": ctx.to_json(), "state": "accepted",
        "from": address_tag("agent", "bob"), "to": address_tag("agent", "alice"),
        "purpose": "atlas-status", "trace": "trace-1", "created": str(NOW_MS),
        "deadline": str(NOW_MS + 30_000), "attempts": "0", "updated": str(NOW_MS),
        "fp": call_fingerprint(envelope),
    }
    assert await redis.pexpiretime(keys.message("m-1")) == NOW_MS + 30_000 + 86_400_000
    assert await redis.zrange(keys.open, 0, -1, withscores=True) == [(b"m-1", NOW_MS + 30_000)]
    [(_, fields)] = await redis.xrange(keys.outbox)
    assert fields == {b"id": b"m-1"}
    [event] = await _events(redis, ns)
    assert (event.type, event.outcome, event.message_id) == ("message.accepted", "succeeded", "m-1")
    assert (event.actor, event.receiver, event.trace_id) == (agent("bob"), agent("alice"),
                                                             "trace-1")
    assert "Atlas" not in event.to_json()  # payloads never reach the audit stream


async def test_oversized_payload_is_denied_and_writes_nothing(
    redis: Redis, ns: str, keyspace: Keyspace
) -> None:
    transport = _transport(redis, max_payload_bytes=100)
    ctx = make_context(ns)

    receipt = await transport.deliver(ctx, make_envelope(ctx, payload="é" * 51))

    assert isinstance(receipt, DeliveryDenied)
    assert receipt.error.code == "payload_too_large"
    assert await keyspace() == set()
    ok = await transport.deliver(ctx, make_envelope(ctx, id="m-2", payload="x" * 98))
    assert isinstance(ok, DeliveryAccepted)


async def test_duplicate_id_is_refused_without_a_second_spend_or_entry(
    redis: Redis, ns: str, keys: Keys, keyspace: Keyspace
) -> None:
    transport = _transport(redis)
    ctx = make_context(ns)
    await transport.deliver(ctx, make_envelope(ctx))
    before = await redis.hgetall(keys.message("m-1"))

    # The attacker replays the id with another payload and another recipient.
    again = await transport.deliver(ctx, make_envelope(ctx, agent("mallory"), payload="forged"))

    assert isinstance(again, DeliveryDenied)
    assert again.error.code == "duplicate_message"
    assert await redis.hgetall(keys.message("m-1")) == before
    assert await redis.xlen(keys.outbox) == 1
    assert await TraceBudget(redis).get(ns, "trace-1") == 15
    assert [(e.type, e.reason) for e in await _events(redis, ns)] == [
        ("message.accepted", None), ("message.refused", "duplicate_message")]
    assert await keyspace() == {keys.message("m-1"), keys.budget("trace-1"), keys.open,
                                keys.outbox, keys.audit, keys.trace("trace-1")}


async def test_budget_drains_across_new_conversations_of_one_trace(
    redis: Redis, ns: str, keys: Keys, keyspace: Keyspace
) -> None:
    transport = _transport(redis, default_budget_hops=3)
    a, b = make_context(ns, agent("a"), purpose="p1"), make_context(ns, agent("b"), purpose="p2")
    hops = [(a, agent("b")), (b, agent("a")), (a, group("fresh-conversation")), (b, agent("a"))]

    receipts = [await transport.deliver(ctx, make_envelope(ctx, to, id=f"m-{i}"))
                for i, (ctx, to) in enumerate(hops)]

    assert [r.status for r in receipts] == ["accepted", "accepted", "accepted", "denied"]
    assert isinstance(receipts[3], DeliveryDenied)
    assert receipts[3].error.code == "budget_exhausted"
    assert not await redis.exists(keys.message("m-3"))
    assert await redis.xlen(keys.outbox) == 3
    assert await redis.zcard(keys.open) == 3
    assert [e.type for e in await _events(redis, ns)][-1] == "message.refused"
    # Only the host replenishes; a new trace has its own budget.
    await TraceBudget(redis).set(ns, "trace-1", 1)
    assert (await transport.deliver(b, make_envelope(b, id="m-4"))).status == "accepted"
    other = make_context(ns, trace="trace-2")
    assert (await transport.deliver(other, make_envelope(other, id="m-5"))).status == "accepted"
    assert len(await keyspace()) == 5 + 7  # markers, 2 budgets, 2 traces, open, outbox, audit


async def test_budget_is_one_authority_for_concurrent_clients(
    redis_factory: Callable[[], Awaitable[Redis]], ns: str
) -> None:
    clients = [await redis_factory() for _ in range(4)]
    transports = [_transport(c) for c in clients]
    await TraceBudget(clients[0]).set(ns, "trace-1", 7)
    ctx = make_context(ns)
    statuses: list[str] = []

    async def send(i: int) -> None:
        receipt = await transports[i % 4].deliver(ctx, make_envelope(ctx, id=f"m-{i}"))
        statuses.append(receipt.status if not isinstance(receipt, DeliveryDenied)
                        else receipt.error.code)

    try:
        async with anyio.create_task_group() as tg:
            for i in range(40):
                tg.start_soon(send, i)
        assert statuses.count("accepted") == 7
        assert statuses.count("budget_exhausted") == 33
        assert await clients[1].zcard(Keys(ns).open) == 7
        assert await TraceBudget(clients[2]).get(ns, "trace-1") == 0
    finally:
        leftover = await scan_keyspace(clients[0], ns)
        if leftover:
            await clients[0].delete(*leftover)


async def test_deadline_is_capped_by_the_running_turn(
    redis: Redis, ns: str, keys: Keys, keyspace: Keyspace
) -> None:
    transport = _transport(redis, request_timeout_s=60)
    ctx = make_context(ns)
    with deadline_scope(NOW_MS + 5_000), deadline_scope(NOW_MS + 9_000):
        capped = await transport.deliver(ctx, make_envelope(ctx, id="nested"))
    free = await transport.deliver(ctx, make_envelope(ctx, id="root"))

    assert capped.metadata == {"deadlineMs": NOW_MS + 5_000, "hopsLeft": 15}
    assert free.metadata == {"deadlineMs": NOW_MS + 60_000, "hopsLeft": 14}
    assert await redis.zscore(keys.open, "nested") == NOW_MS + 5_000
    assert len(await keyspace()) == 7  # with the trace index


async def test_store_failure_is_a_failed_receipt_not_a_hang(ns: str) -> None:
    dead = Redis(host="127.0.0.1", port=1, socket_connect_timeout=0.5, socket_timeout=0.5)
    try:
        ctx = make_context(ns)
        with anyio.fail_after(5):
            receipt = await _transport(dead).deliver(ctx, make_envelope(ctx))
    finally:
        await dead.aclose()
    assert isinstance(receipt, DeliveryFailed)
    assert receipt.error.code == "message_delivery_failed"
    assert "127.0.0.1" not in receipt.error.message


async def test_on_accepted_is_called_and_its_failure_is_ignored(
    redis: Redis, ns: str, keyspace: Keyspace
) -> None:
    woken: list[tuple[str, str]] = []

    async def hook(namespace: str, message_id: str) -> None:
        woken.append((namespace, message_id))
        raise ConnectionError("arq is down")

    transport = RedisStreamTransport(redis, on_accepted=hook,
                                     settings=TransportSettings(route_check=False))
    ctx = make_context(ns)
    assert (await transport.deliver(ctx, make_envelope(ctx))).status == "accepted"
    assert (await transport.deliver(ctx, make_envelope(ctx))).status == "denied"
    assert woken == [(ns, "m-1")]
    assert len(await keyspace()) == 6  # with the trace index


@pytest.mark.parametrize("hostile", ["a}:x", "a:msg:m", "{a}", "*", "a b", "ü" * 256])
async def test_hostile_ids_stay_in_their_own_keys(
    redis: Redis, hostile: str, keyspace: Keyspace, ns: str
) -> None:
    transport = _transport(redis)
    plain = make_context(ns)
    evil = AccessContext.from_wire({**plain.to_wire(), "namespaceId": f"{ns}}}:{hostile}"[:256],
                                    "traceId": hostile[:200]})
    # Same message id in two namespaces, one of them crafted to collide with the other.
    for ctx, mid in ((plain, "m-1"), (evil, "m-1"), (plain, hostile)):
        receipt = await transport.deliver(ctx, make_envelope(ctx, id=mid))
        assert receipt.status == "accepted"
    evil_keys = await scan_keyspace(redis, evil.namespace_id)
    try:
        assert len(await keyspace()) == 7  # 2 markers, budget, trace index, open, outbox, audit
        assert len(evil_keys) == 6
        assert not evil_keys & await keyspace()
        assert Keys(ns).message(hostile) in await keyspace()
    finally:
        await redis.delete(*evil_keys)
