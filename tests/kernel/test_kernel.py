"""Kernel: tool catalog and invocation gates, send_message, admission, audit."""

from __future__ import annotations

from typing import Any

import pytest

from sharedos_redis.errors import ConfigurationError, ContractError, UnsupportedProtocolVersion
from sharedos_redis.kernel.contracts import (
    AccessContext,
    DeliveryAccepted,
    JsonValue,
    MessageEnvelope,
    ProtocolError,
    ToolCall,
)
from sharedos_redis.kernel.messaging import MESSAGES_REQUEST_TOOL
from sharedos_redis.kernel.testing import InMemoryTransport
from tests.kernel.kernel_world import (
    ALICE,
    BOB,
    CAROL,
    NOW,
    PURPOSE,
    TRACE,
    context,
    file_tool,
    grant,
    invoke_grant,
    make_world,
    send_grant,
    tool_call,
)

pytestmark = pytest.mark.anyio

READ = grant("g-read", ALICE, "files", ["reports"], ["read"])


def envelope(**changes: Any) -> MessageEnvelope:
    """A host-authored envelope from alice to bob in the default context."""
    wire: dict[str, Any] = {
        "version": "2", "id": "m-1", "sender": ALICE.to_wire(), "receiver": BOB.to_wire(),
        "purpose": PURPOSE, "payload": {"secret": "s3cr3t-payload"}, "traceId": TRACE,
        "createdAt": NOW}
    wire.update(changes)
    return MessageEnvelope.from_wire(wire)


# --- registration and discovery ------------------------------------------------------------

def test_register_rejects_duplicates_and_the_reserved_name() -> None:
    world = make_world()
    world.register_files()
    with pytest.raises(ConfigurationError):
        world.register_files()

    async def handler(ctx: AccessContext, call: ToolCall) -> JsonValue:
        return None

    with pytest.raises(ConfigurationError):
        world.kernel.register_tool(MESSAGES_REQUEST_TOOL, handler)


async def test_list_tools_needs_registration_namespace_and_capability() -> None:
    world = make_world(READ)
    world.register_files()
    world.register_files(file_tool("files.write", action="write"))
    names = [t.name for t in await world.kernel.list_tools(context(ALICE, namespaces=["files"]))]
    assert names == ["files.read"]  # write: registered and enabled, but no grant
    assert await world.kernel.list_tools(context(ALICE, namespaces=["other"])) == []
    assert await world.kernel.list_tools(context(BOB, namespaces=["files"])) == []


async def test_discovery_never_consumes_a_use() -> None:
    world = make_world(grant("g-once", ALICE, "files", ["reports"], ["read"], max_uses=1))
    world.register_files()
    ctx = context(ALICE)
    for _ in range(3):
        assert [t.name for t in await world.kernel.list_tools(ctx)] == ["files.read"]
    assert await world.usage.used("acme", "g-once") == 0
    first = await world.kernel.invoke_tool(ctx, tool_call("files.read", {}))
    second = await world.kernel.invoke_tool(ctx, tool_call("files.read", {}, call_id="c2"))
    assert first.status == "succeeded"
    # exhausted: no longer discoverable, so unavailable; the real reason is audit-only
    assert second.status == "denied" and second.error.code == "tool_unavailable"
    assert world.audit_of("tool.invoked")[-1].cause == "grant_exhausted"
    assert len(world.handled) == 1
    assert await world.usage.used("acme", "g-once") == 1
    assert await world.kernel.list_tools(ctx) == []


# --- invocation ----------------------------------------------------------------------------

async def test_invoke_runs_the_handler_with_the_trusted_context() -> None:
    world = make_world(READ)
    world.register_files(output={"lines": 3})
    result = await world.kernel.invoke_tool(context(ALICE), tool_call("files.read",
                                                                 {"path": "s3cr3t-arg"}))
    assert result.status == "succeeded" and result.output == {"lines": 3}
    assert result.call_id == "call-1" and result.tool == "files.read"
    [invoked] = world.audit_of("tool.invoked")
    assert invoked.outcome == "succeeded" and invoked.operation_id == "call-1"
    assert world.handled[0].arguments == {"path": "s3cr3t-arg"}
    assert all("s3cr3t" not in e.to_json() for e in world.audit.events)  # never in audit


@pytest.mark.parametrize(
    ("ctx", "tool", "code", "cause"),
    [
        (context(BOB), "files.read", "tool_unavailable", "no_matching_grant"),
        (context(ALICE, namespaces=["messages"]), "files.read", "tool_unavailable",
         "namespace_disabled"),
        (context(ALICE), "files.delete", "tool_unavailable", "not_registered"),
    ],
)
async def test_invoke_refusals_never_run_the_handler(ctx: AccessContext, tool: str, code: str,
                                                     cause: str | None) -> None:
    world = make_world(READ)
    world.register_files()
    result = await world.kernel.invoke_tool(ctx, tool_call(tool, {}))
    assert result.status == "denied" and result.error.code == code
    assert world.handled == []
    [invoked] = world.audit_of("tool.invoked")
    assert (invoked.reason, invoked.cause) == (code, cause)
    assert cause is None or cause not in result.to_json()  # the real reason is audit-only


async def test_trace_mismatch_is_refused_first() -> None:
    world = make_world(READ)
    world.register_files()
    result = await world.kernel.invoke_tool(context(ALICE), tool_call("files.read", {},
                                                                      trace="t-other"))
    assert result.status == "denied" and result.error.code == "trace_mismatch"
    assert world.handled == [] and world.audit_of("authorization.checked") == []


async def test_handler_failure_is_failed_without_its_text() -> None:
    world = make_world(READ)

    async def broken(ctx: AccessContext, call: ToolCall) -> JsonValue:
        raise KeyError("s3cr3t-internal")

    world.kernel.register_tool(file_tool(), broken)
    result = await world.kernel.invoke_tool(context(ALICE), tool_call("files.read", {}))
    assert result.status == "failed" and result.error.code == "tool_failed"
    assert "s3cr3t" not in result.to_json()
    assert all("s3cr3t" not in e.to_json() for e in world.audit.events)


async def test_handler_returning_non_json_is_an_invalid_tool_result() -> None:
    world = make_world(READ)
    world.register_files(output={"bad": {1, 2}})  # a set is not JSON
    result = await world.kernel.invoke_tool(context(ALICE), tool_call("files.read", {}))
    assert result.status == "failed" and result.error.code == "invalid_tool_result"


async def test_invoke_parses_a_raw_call_strictly() -> None:
    world = make_world(READ)
    world.register_files()
    raw = tool_call("files.read", {}).to_wire()
    assert (await world.kernel.invoke_tool(context(ALICE), raw)).status == "succeeded"
    with pytest.raises(ContractError):
        await world.kernel.invoke_tool(context(ALICE), {**raw, "sender": ALICE.to_wire()})


async def test_audit_failure_before_a_tool_effect_stops_it() -> None:
    world = make_world(READ)
    world.register_files()
    world.audit.fail = True
    result = await world.kernel.invoke_tool(context(ALICE), tool_call("files.read", {}))
    assert result.status == "denied" and result.error.code == "audit_unavailable"
    assert world.handled == []


# --- send_message --------------------------------------------------------------------------

async def test_send_message_delivers_the_same_envelope_once() -> None:
    world = make_world(send_grant("g-send", ALICE, BOB, max_uses=1))
    assert world.transport is not None
    message = envelope()
    receipt = await world.kernel.send_message(context(ALICE), message)
    assert isinstance(receipt, DeliveryAccepted) and receipt.message_id == "m-1"
    assert world.transport.envelopes == [message]
    again = await world.kernel.send_message(context(ALICE), envelope(id="m-2"))
    assert again.status == "denied" and again.error.code == "grant_exhausted"
    assert world.transport.calls == 1
    [sent, refused] = world.audit_of("message.sent")
    assert (sent.outcome, sent.message_id) == ("succeeded", "m-1")
    assert (refused.outcome, refused.reason) == ("denied", "grant_exhausted")
    assert all("s3cr3t" not in e.to_json() for e in world.audit.events)


@pytest.mark.parametrize("changes", [
    {"sender": CAROL.to_wire()}, {"purpose": "other-purpose"}, {"traceId": "t-forged"}])
async def test_send_message_context_mismatch(changes: dict[str, Any]) -> None:
    world = make_world(send_grant("g-send", ALICE, BOB), send_grant("g-c", CAROL, BOB))
    assert world.transport is not None
    receipt = await world.kernel.send_message(context(ALICE), envelope(**changes))
    assert receipt.status == "denied" and receipt.error.code == "message_context_mismatch"
    assert world.transport.calls == 0 and world.audit_of("authorization.checked") == []


async def test_send_message_without_a_grant_is_denied() -> None:
    world = make_world(send_grant("g-send", ALICE, CAROL))
    assert world.transport is not None
    receipt = await world.kernel.send_message(context(ALICE), envelope())
    assert receipt.status == "denied" and receipt.error.code == "no_matching_grant"
    assert world.transport.calls == 0


async def test_send_message_without_transport() -> None:
    world = make_world(send_grant("g-send", ALICE, BOB, max_uses=1), with_transport=False)
    receipt = await world.kernel.send_message(context(ALICE), envelope())
    assert receipt.status == "failed"
    assert receipt.error.code == "message_transport_not_configured"
    assert await world.usage.used("acme", "g-send") == 0  # nothing spent on an impossible send


def _other_id(env: MessageEnvelope) -> object:
    return DeliveryAccepted(message_id="not-" + env.id, timestamp=NOW)


@pytest.mark.parametrize(("transport", "code"), [
    (InMemoryTransport("raise"), "message_delivery_failed"),
    (InMemoryTransport(receipt=_other_id), "invalid_message_receipt"),
    (InMemoryTransport(receipt=lambda env: {"status": "accepted", "messageId": env.id}),
     "invalid_message_receipt"),
    (InMemoryTransport(receipt=lambda env: "accepted"), "invalid_message_receipt"),
    (InMemoryTransport(receipt=lambda env: DeliveryAccepted.model_construct(
        message_id=env.id, timestamp="yesterday")), "invalid_message_receipt"),
])
async def test_send_message_transport_failures(transport: InMemoryTransport, code: str) -> None:
    world = make_world(send_grant("g-send", ALICE, BOB), transport=transport)
    receipt = await world.kernel.send_message(context(ALICE), envelope())
    assert receipt.status == "failed" and receipt.error.code == code
    assert receipt.message_id == "m-1" and "InMemoryTransport" not in receipt.to_json()
    assert transport.calls == 1


async def test_a_denied_receipt_is_never_upgraded() -> None:
    transport = InMemoryTransport("deny", code="budget_exhausted")
    world = make_world(send_grant("g-send", ALICE, BOB), transport=transport)
    receipt = await world.kernel.send_message(context(ALICE), envelope())
    assert receipt.status == "denied" and receipt.error.code == "budget_exhausted"
    assert world.audit_of("message.sent")[0].outcome == "denied"


async def test_a_raw_receipt_dict_is_parsed_strictly() -> None:
    ok = InMemoryTransport(receipt=lambda env: {"status": "delivered", "messageId": env.id,
                                                "timestamp": NOW})
    world = make_world(send_grant("g-send", ALICE, BOB), transport=ok)
    assert (await world.kernel.send_message(context(ALICE), envelope())).status == "delivered"


@pytest.mark.parametrize(("changes", "error"), [
    ({"intent": "ask"}, ContractError), ({"version": "1"}, UnsupportedProtocolVersion)])
async def test_malformed_envelope_raises_and_nothing_happens(changes: dict[str, Any],
                                                             error: type[Exception]) -> None:
    world = make_world(send_grant("g-send", ALICE, BOB))
    assert world.transport is not None
    with pytest.raises(error):
        await world.kernel.send_message(context(ALICE), {**envelope().to_wire(), **changes})
    assert world.transport.calls == 0 and world.audit.events == []


async def test_audit_failure_before_send_stops_delivery() -> None:
    world = make_world(send_grant("g-send", ALICE, BOB))
    assert world.transport is not None
    world.audit.fail = True
    receipt = await world.kernel.send_message(context(ALICE), envelope())
    assert receipt.status == "denied" and receipt.error.code == "audit_unavailable"
    assert world.transport.calls == 0


# --- admission -----------------------------------------------------------------------------

async def test_admit_turn_consumes_the_invoke_grant() -> None:
    world = make_world(invoke_grant("g-inv", BOB, max_uses=1))
    first = await world.kernel.admit_turn(context(BOB), BOB)
    assert first.allowed and first.matched_grant_id == "g-inv"
    second = await world.kernel.admit_turn(context(BOB), BOB)
    assert (second.allowed, second.reason_code) == (False, "grant_exhausted")
    other = await world.kernel.admit_turn(context(ALICE), ALICE)
    assert (other.allowed, other.reason_code) == (False, "no_matching_grant")


def test_protocol_error_messages_carry_no_input() -> None:
    from sharedos_redis.kernel.tools import protocol_error

    assert protocol_error("tool_failed") == ProtocolError(code="tool_failed",
                                                          message="the tool failed")
