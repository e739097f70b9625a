"""messages.request: the model authors only {recipient, payload}; replies are validated."""

from __future__ import annotations

from typing import Any

import anyio
import pytest

from sharedos_redis.errors import RequestTimedOut, StoreUnavailable
from sharedos_redis.kernel.contracts import AccessContext, MessageEnvelope, ToolResult
from sharedos_redis.kernel.messaging import MESSAGES_REQUEST
from sharedos_redis.kernel.testing import InMemoryRouter, InMemoryTransport, make_reply
from tests.kernel.kernel_world import (
    ALICE,
    BOB,
    CAROL,
    MALLORY,
    NOW,
    PURPOSE,
    TRACE,
    World,
    context,
    make_world,
    send_grant,
    tool_call,
)

pytestmark = pytest.mark.anyio

ARGS: dict[str, Any] = {"recipient": {"kind": "agent", "agentId": "bob"},
                        "payload": {"question": "Atlas status?"}}


def world_for(**kw: Any) -> World:
    return make_world(send_grant("g-send", ALICE, BOB), **kw)


async def request(world: World, arguments: dict[str, Any] | None = None, *,
                  ctx: AccessContext | None = None, call_id: str = "call-1") -> ToolResult:
    call = tool_call(MESSAGES_REQUEST, ARGS if arguments is None else arguments, call_id=call_id)
    return await world.kernel.invoke_tool(ctx or context(ALICE), call)


def untouched(world: World) -> bool:
    assert world.transport is not None and world.router is not None
    return world.transport.calls == 0 and world.router.requests == []


async def test_success_returns_the_reply_payload_of_a_trusted_envelope() -> None:
    world = world_for()
    assert world.transport is not None and world.router is not None
    result = await request(world, call_id="call-77")
    assert result.status == "succeeded" and result.output == {"status": "green"}
    [sent] = world.transport.envelopes
    assert sent.id == "msg-1" == world.message_ids[0] and sent.id != "call-77"
    assert sent.sender == ALICE and sent.receiver == BOB and sent.reply_to is None
    assert (sent.purpose, sent.trace_id, sent.created_at) == (PURPOSE, TRACE, NOW)
    assert sent.payload == ARGS["payload"]
    assert world.router.requests == [sent]  # the very envelope that was delivered
    assert world.transport.contexts == [context(ALICE)]
    assert all("Atlas" not in e.to_json() and "green" not in e.to_json()
               for e in world.audit.events)  # payloads never reach audit


@pytest.mark.parametrize("key", [
    "sender", "purpose", "traceId", "messageId", "intent", "replyTo", "unknownKey"])
async def test_model_authored_trusted_fields_are_rejected(key: str) -> None:
    world = world_for()
    value: Any = ALICE.to_wire() if key == "sender" else "forged"
    result = await request(world, {**ARGS, key: value})
    assert result.status == "failed" and result.error.code == "invalid_tool_arguments"
    assert untouched(world)
    assert await world.usage.used("acme", "g-send") == 0
    assert world.message_ids == []


@pytest.mark.parametrize("arguments", [
    {"recipient": {"kind": "agent", "agentId": " bob"}, "payload": 1},
    {"recipient": {"kind": "agent", "agentId": "bob", "sender": "x"}, "payload": 1},
    {"recipient": {"kind": "agent", "agentId": "a/b"}, "payload": 1},
    {"payload": 1},
    {"recipient": {"kind": "agent", "agentId": "bob"}},
])
async def test_malformed_arguments_touch_nothing(arguments: dict[str, Any]) -> None:
    world = world_for()
    result = await request(world, arguments)
    assert result.status == "failed" and result.error.code == "invalid_tool_arguments"
    assert untouched(world)


async def test_the_send_capability_is_consumed_exactly_once() -> None:
    # carol's grant keeps messages.request discoverable once bob's single use is spent
    world = make_world(send_grant("g-send", ALICE, BOB, max_uses=1),
                       send_grant("g-carol", ALICE, CAROL))
    assert world.transport is not None
    first = await request(world)
    assert first.status == "succeeded"
    assert await world.usage.used("acme", "g-send") == 1
    second = await request(world, call_id="call-2")
    assert second.status == "denied" and second.error.code == "grant_exhausted"
    assert world.transport.calls == 1 and await world.usage.used("acme", "g-send") == 1


async def test_an_exhausted_only_grant_hides_the_tool() -> None:
    world = make_world(send_grant("g-send", ALICE, BOB, max_uses=1))
    assert world.transport is not None
    assert (await request(world)).status == "succeeded"
    assert await world.kernel.list_tools(context(ALICE)) == []
    second = await request(world, call_id="call-2")
    assert second.status == "denied" and second.error.code == "tool_unavailable"
    assert world.audit_of("tool.invoked")[-1].cause == "not_discoverable"
    assert world.transport.calls == 1


async def test_a_recipient_outside_the_grant_is_denied() -> None:
    world = world_for()
    result = await request(world, {**ARGS, "recipient": CAROL.to_wire()})
    assert result.status == "denied" and result.error.code == "no_matching_grant"
    assert untouched(world)


def _raw(ctx: AccessContext, req: MessageEnvelope) -> object:
    return make_reply(req, {"leak": "s3cr3t"}).to_wire()


def _unknown_key(ctx: AccessContext, req: MessageEnvelope) -> object:
    return {**make_reply(req, {"leak": "s3cr3t"}).to_wire(), "intent": "answer"}


FORGERIES = {
    "wrong replyTo": lambda ctx, req: make_reply(req, {"leak": "s3cr3t"}, reply_to="msg-999"),
    "no replyTo": lambda ctx, req: make_reply(req, {"leak": "s3cr3t"}, reply_to=None),
    "unreversed parties": lambda ctx, req: make_reply(
        req, {"leak": "s3cr3t"}, sender=req.sender, receiver=req.receiver),
    "changed purpose": lambda ctx, req: make_reply(req, {"leak": "s3cr3t"}, purpose="other"),
    "changed trace": lambda ctx, req: make_reply(req, {"leak": "s3cr3t"}, trace_id="t-2"),
    "from a third agent": lambda ctx, req: make_reply(req, {"leak": "s3cr3t"}, sender=MALLORY),
    "to a third agent": lambda ctx, req: make_reply(req, {"leak": "s3cr3t"}, receiver=MALLORY),
    "raw dict": _raw,
    "unknown key": _unknown_key,
    "not an envelope": lambda ctx, req: "s3cr3t",
}


@pytest.mark.parametrize("forge", FORGERIES.values(), ids=FORGERIES.keys())
async def test_forged_replies_are_invalid_and_leak_nothing(forge: Any) -> None:
    world = world_for(router=InMemoryRouter(forge))
    assert world.router is not None
    result = await request(world)
    assert result.status == "failed" and result.error.code == "invalid_message_reply"
    assert "s3cr3t" not in result.to_json()
    assert all("s3cr3t" not in e.to_json() for e in world.audit.events)
    assert len(world.router.requests) == 1


async def test_a_correct_reply_passes_the_same_checks() -> None:
    world = world_for(router=InMemoryRouter(lambda ctx, req: make_reply(req, {"ok": 1})))
    assert (await request(world)).status == "succeeded"


async def test_router_timeout_reports_the_outcome_code() -> None:
    world = world_for(router=InMemoryRouter(error=RequestTimedOut("msg-1")))
    result = await request(world)
    assert result.status == "failed" and result.error.code == "message_reply_resolution_failed"
    assert result.error.details == {"outcome": "request_timed_out"}


async def test_router_crash_leaks_no_text() -> None:
    world = world_for(router=InMemoryRouter(error=StoreUnavailable("wait", "s3cr3t-host")))
    result = await request(world)
    assert result.status == "failed" and result.error.code == "message_reply_resolution_failed"
    assert result.error.details is None and "s3cr3t" not in result.to_json()


@pytest.mark.parametrize("transport", [
    InMemoryTransport("deny", code="budget_exhausted"), InMemoryTransport("fail"),
    InMemoryTransport("raise")])
async def test_an_unaccepted_request_never_reaches_the_router(
        transport: InMemoryTransport) -> None:
    world = world_for(transport=transport)
    assert world.router is not None
    result = await request(world)
    assert result.status == "failed" and result.error.code == "message_request_not_accepted"
    assert world.router.requests == [] and transport.calls == 1


async def test_a_delivered_receipt_is_also_accepted() -> None:
    world = world_for(transport=InMemoryTransport("deliver"))
    assert (await request(world)).status == "succeeded"


@pytest.mark.parametrize("configured", [
    {"with_transport": False}, {"with_router": False}])
async def test_offered_only_with_transport_and_router(configured: dict[str, bool]) -> None:
    world = world_for(**configured)
    assert await world.kernel.list_tools(context(ALICE)) == []
    result = await request(world)
    assert result.status == "denied" and result.error.code == "tool_unavailable"
    assert world.audit_of("tool.invoked")[0].cause == "not_configured"


async def test_offered_when_configured_enabled_and_reachable() -> None:
    world = world_for()
    assert [t.name for t in await world.kernel.list_tools(context(ALICE))] == [MESSAGES_REQUEST]
    assert await world.kernel.list_tools(context(BOB)) == []  # bob holds no send grant


@pytest.mark.parametrize(("ctx", "cause"), [
    (context(ALICE, namespaces=["files"]), "namespace_disabled"),
    (context(BOB), "not_discoverable"),
])
async def test_unusable_request_tool_is_unavailable(ctx: AccessContext, cause: str) -> None:
    world = world_for()
    assert await world.kernel.list_tools(ctx) == []
    result = await request(world, ctx=ctx)
    assert result.status == "denied" and result.error.code == "tool_unavailable"
    assert cause not in result.to_json()
    assert world.audit_of("tool.invoked")[0].cause == cause
    assert untouched(world)


async def test_trace_mismatch_comes_before_everything() -> None:
    world = world_for()
    call = tool_call(MESSAGES_REQUEST, {"sender": "forged"}, trace="t-other")
    result = await world.kernel.invoke_tool(context(ALICE), call)
    assert result.status == "denied" and result.error.code == "trace_mismatch"
    assert untouched(world)


async def test_audit_failure_before_delivery_stops_it() -> None:
    world = world_for()
    world.audit.fail = True
    result = await request(world)
    assert result.status == "denied" and result.error.code == "audit_unavailable"
    assert untouched(world)


async def test_cancellation_while_waiting_for_the_reply_propagates() -> None:
    world = world_for(router=InMemoryRouter(block=True))
    assert world.router is not None
    results: list[ToolResult] = []

    async def run() -> None:
        results.append(await request(world))

    with anyio.fail_after(5):
        async with anyio.create_task_group() as tg:
            tg.start_soon(run)
            await world.router.waiting.wait()
            tg.cancel_scope.cancel()
    assert results == []  # cancelled, not turned into a result


async def test_concurrent_requests_get_their_ids_in_the_order_they_were_started() -> None:
    """A re-run turn names the same nested requests only if ids follow the start order,
    not the order the calls' I/O happens to finish (issue 12)."""
    world = world_for()
    gate, held = anyio.Event(), []
    load = world.grants.grants_for

    async def first_load_waits(*args: Any) -> Any:
        if not held:  # the first call's grant load is slow
            held.append(True)
            await gate.wait()
        return await load(*args)

    world.grants.grants_for = first_load_waits  # type: ignore[method-assign]  # a slow store
    results: dict[str, ToolResult] = {}
    second_done = anyio.Event()

    async def ask(payload: str) -> None:
        results[payload] = await request(world, {**ARGS, "payload": payload},
                                         call_id=f"call-{payload}")
        if payload == "second":
            second_done.set()

    with anyio.fail_after(5):
        async with anyio.create_task_group() as tg:
            tg.start_soon(ask, "first")
            tg.start_soon(ask, "second")
            await second_done.wait()  # the second call overtook the first one
            gate.set()
    assert world.transport is not None
    assert [e.payload for e in world.transport.envelopes] == ["second", "first"]
    assert {e.payload: e.id for e in world.transport.envelopes} == {"first": "msg-1",
                                                                     "second": "msg-2"}
    assert all(result.status == "succeeded" for result in results.values())
