"""Forged replies written past the router, and replies from the wrong party.

The attacker can write to Redis (or call ``router.settle_reply``) but the requester
must only ever get the reply its request's marker settled with: the marker is
authoritative, the kernel re-validates. Runs on fakeredis and real Redis.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from typing import Any

import anyio
import pytest
from redis.asyncio import Redis

from sharedos_redis.kernel.contracts import (
    JsonValue,
    MessageEnvelope,
    ToolResult,
    agent,
    format_timestamp,
)
from sharedos_redis.store.keys import Keys
from sharedos_redis.worker.host import MessagingHost
from tests.worker.helpers import drop_namespace

from . import fault_app
from .requester import ask

pytestmark = [pytest.mark.anyio, pytest.mark.usefixtures("served")]  # no worker runs


@pytest.fixture
async def host(redis: Redis, ns: str) -> AsyncIterator[MessagingHost]:
    built = fault_app.build(redis, ns, request_timeout_s=4, turn_timeout_s=3)
    await fault_app.grant_all(built, [fault_app.REQUESTER], ["alice"])
    try:
        async with built:
            yield built
    finally:
        await drop_namespace(redis, ns)


async def _open_request(host: MessagingHost) -> MessageEnvelope:
    """The one open request, once its waiter is registered with the listener."""
    k = Keys(host.namespace)
    while True:  # bounded by the caller's fail_after
        ids = await host.redis.zrange(k.open, 0, -1)
        # white-box: the waiter's slot exists once the listener's start position is fixed
        slots = host.router._listener._slots if host.router._listener else {}
        if ids and (host.namespace, ids[0].decode()) in slots:
            env, = await host.markers.fields(host.namespace, ids[0].decode(), ("env",))
            assert env is not None
            return MessageEnvelope.from_json(env)
        await anyio.sleep(0.005)


def _reply(request: MessageEnvelope, payload: JsonValue, **changes: Any) -> MessageEnvelope:
    wire = MessageEnvelope(
        id=f"r-{uuid.uuid4().hex[:8]}", sender=request.receiver, receiver=request.sender,
        purpose=request.purpose, payload=payload, trace_id=request.trace_id,
        created_at=format_timestamp(), reply_to=request.id).to_wire()
    wire.update(changes)
    return MessageEnvelope.from_wire(wire)


async def _attack(host: MessagingHost, attack: Any) -> tuple[ToolResult, MessageEnvelope]:
    """Start a request, run ``attack(request)`` while it waits, then settle the real reply."""
    results: list[ToolResult] = []
    with anyio.fail_after(10):
        async with anyio.create_task_group() as tg:

            async def requester() -> None:
                results.append(await ask(host, "alice", {"q": 1}))

            tg.start_soon(requester)
            request = await _open_request(host)
            await attack(request)
            real = await host.router.settle_reply(host.namespace, _reply(request, {"real": 1}))
            assert real.settled, real
    return results[0], request


async def _real_only(host: MessagingHost, result: ToolResult, request: MessageEnvelope) -> None:
    assert result.status == "succeeded", result
    assert result.output == {"real": 1}
    events = await host.router.timeline(host.namespace, request.id)
    assert [e.type for e in events].count("reply.settled") == 1


async def test_forged_settlement_entry_is_not_the_reply(host: MessagingHost) -> None:
    async def forge(request: MessageEnvelope) -> None:
        forged = _reply(request, {"forged": 1})
        await host.redis.xadd(Keys(host.namespace).settled, {
            "id": request.id, "state": "replied", "result": forged.to_json()})
        # the marker is still open: the forgery changed nothing durable
        state, = await host.markers.fields(host.namespace, request.id, ("state",))
        assert state in {"accepted", "dispatched", "running"}

    result, request = await _attack(host, forge)
    await _real_only(host, result, request)


async def test_forged_failure_entry_does_not_end_the_request(host: MessagingHost) -> None:
    async def forge(request: MessageEnvelope) -> None:
        await host.redis.xadd(Keys(host.namespace).settled, {
            "id": request.id, "state": "failed", "result": "recipient_turn_denied"})

    result, request = await _attack(host, forge)
    await _real_only(host, result, request)


async def test_forged_reply_field_on_an_open_marker_is_ignored(host: MessagingHost) -> None:
    async def forge(request: MessageEnvelope) -> None:
        forged = _reply(request, {"forged": 1})
        await host.redis.hset(  # type: ignore[misc]  # redis-py types the async client as sync
            Keys(host.namespace).message(request.id), "reply", forged.to_json())

    result, request = await _attack(host, forge)
    await _real_only(host, result, request)


@pytest.mark.parametrize("change", [
    {"sender": agent("mallory").to_wire()}, {"receiver": agent("mallory").to_wire()},
    {"purpose": "other purpose"}, {"traceId": "trace-other"}, {"replyTo": "m-other"},
], ids=["third-agent", "wrong-receiver", "purpose", "trace", "reply-to"])
async def test_mismatched_reply_via_router_is_refused(host: MessagingHost,
                                                      change: dict[str, Any]) -> None:
    refusals: list[str] = []

    async def reply_wrongly(request: MessageEnvelope) -> None:
        settlement = await host.router.settle_reply(host.namespace,
                                                    _reply(request, {"forged": 1}, **change))
        assert not settlement.settled
        refusals.append(settlement.code)

    result, request = await _attack(host, reply_wrongly)
    await _real_only(host, result, request)
    assert refusals[0] in {"reply_mismatch", "unknown_request"}


async def test_malformed_reply_dict_is_refused_and_audited(host: MessagingHost) -> None:
    async def reply_malformed(request: MessageEnvelope) -> None:
        wire = _reply(request, {"forged": 1}).to_wire()
        settlement = await host.router.settle_reply(host.namespace, {**wire, "intent": "x"})
        assert (settlement.settled, settlement.code) == (False, "invalid_message_reply")

    result, request = await _attack(host, reply_malformed)
    await _real_only(host, result, request)
    events = await host.router.timeline(host.namespace, request.id)
    assert any(e.type == "reply.refused" and e.reason == "invalid_message_reply" for e in events)
