"""Exact use accounting in the kernel: reserved at the decision, released only before admission."""

from __future__ import annotations

from typing import Any

import pytest

from sharedos_redis.kernel.testing import InMemoryTransport
from tests.kernel.kernel_world import ALICE, BOB, NS, context, make_world, send_grant, tool_call

pytestmark = pytest.mark.anyio


def ask(n: int = 1) -> Any:
    return tool_call("messages.request", {"recipient": BOB.to_wire(), "payload": {"n": n}},
                     call_id=f"call-{n}")


@pytest.mark.parametrize(("mode", "used", "released"), [
    ("accept", 1, 0),  # admitted: the use is committed
    ("deny", 0, 1),    # refused before admission: given back, with its record
    ("fail", 1, 0),    # failed after the transport took it: may have happened, kept
    ("raise", 1, 0),   # unknown outcome: kept, never an automatic refund
])
async def test_a_use_is_released_only_when_the_request_was_refused_before_admission(
        mode: str, used: int, released: int) -> None:
    world = make_world(send_grant("g-send", ALICE, BOB, max_uses=3),
                       transport=InMemoryTransport(mode))  # type: ignore[arg-type]
    await world.kernel.invoke_tool(context(ALICE), ask())
    assert await world.usage.used(NS, "g-send") == used
    records = world.audit_of("grant.usage.released")
    assert len(records) == released
    if records:
        assert records[0].grant_id == "g-send" and records[0].reason == "recipient_unknown"
        assert records[0].operation_id == "msg-1"


async def test_refused_requests_never_exhaust_a_bounded_grant() -> None:
    transport = InMemoryTransport("deny")
    world = make_world(send_grant("g-send", ALICE, BOB, max_uses=1), transport=transport)
    for n in range(5):
        await world.kernel.invoke_tool(context(ALICE), ask(n))
    transport.mode = "accept"
    assert (await world.kernel.invoke_tool(context(ALICE), ask(9))).status == "succeeded"
    assert await world.usage.used(NS, "g-send") == 1


async def test_send_message_without_a_transport_decides_authorization_first() -> None:
    world = make_world(with_transport=False, with_router=False)
    envelope = {"version": "2", "id": "m-1", "sender": ALICE.to_wire(),
                "receiver": BOB.to_wire(), "purpose": "atlas-status", "payload": {},
                "traceId": "t-1", "createdAt": "2026-10-04T09:00:00.000Z"}
    denied = await world.kernel.send_message(context(ALICE), envelope)
    assert denied.status == "denied" and denied.error.code == "no_matching_grant"

    world = make_world(send_grant("g-send", ALICE, BOB, max_uses=1), with_transport=False,
                       with_router=False)
    failed = await world.kernel.send_message(context(ALICE), envelope)
    assert failed.status == "failed" and failed.error.code == "message_transport_not_configured"
    assert await world.usage.used(NS, "g-send") == 0  # nothing was admitted
