"""The recipient turn: admission gates, the runtime's view, limits, endings, isolation."""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import anyio
import pytest

from sharedos_redis.errors import AuditUnavailable, ContractError, UnsupportedProtocolVersion
from sharedos_redis.kernel.contracts import (
    Address,
    AuditEvent,
    ExecutionRequest,
    ExecutionResult,
    JsonValue,
    ToolDefinition,
    ToolResult,
)
from sharedos_redis.kernel.messaging import MESSAGES_REQUEST, MESSAGES_REQUEST_TOOL
from sharedos_redis.kernel.scripted import ScriptedRuntime
from sharedos_redis.kernel.turn import RuntimeHost, TurnExecutor, TurnRequest
from tests.kernel.kernel_world import (
    ALICE,
    BOB,
    CAROL,
    NOW,
    PURPOSE,
    TRACE,
    World,
    context,
    file_tool,
    grant,
    invoke_grant,
    make_world,
    send_grant,
    tool_call,
)

pytestmark = pytest.mark.anyio

ALICE_TURN = invoke_grant("g-inv-alice", ALICE)
BOB_READ = grant("g-bob-read", BOB, "files", ["reports"], ["read"])
ALICE_READ = grant("g-alice-read", ALICE, "files", ["reports"], ["read"])


def execution(*, actor: Address = ALICE, agent: Address = ALICE, receiver: Address = ALICE,
              purpose: str = PURPOSE, trace: str = TRACE,
              tools: tuple[ToolDefinition, ...] = (file_tool(),),
              options: dict[str, int] | None = None,
              state: dict[str, Any] | None = None) -> ExecutionRequest:
    """Alice's turn for a request bob sent her (every field overridable to forge)."""
    wire: dict[str, Any] = {
        "version": "2", "executionId": "exec-1", "agent": agent.to_wire(),
        "context": context(actor).to_wire(),
        "message": {"version": "2", "id": "m-1", "sender": BOB.to_wire(),
                    "receiver": receiver.to_wire(), "purpose": purpose,
                    "payload": {"question": "Atlas status?"}, "traceId": trace,
                    "createdAt": NOW},
        "tools": [t.to_wire() for t in tools]}
    if options is not None:
        wire["options"] = options
    if state is not None:
        wire["state"] = state
    return ExecutionRequest.from_wire(wire)


def scripted(world: World, script: Any) -> tuple[TurnExecutor, ScriptedRuntime]:
    runtime = ScriptedRuntime(script)
    return TurnExecutor(world.kernel, runtime, clock=lambda: world.kernel.clock()), runtime


async def answer(turn: TurnRequest, host: RuntimeHost) -> JsonValue:
    return {"answer": "green"}


def event_types(result: ExecutionResult) -> list[str]:
    return [event.type for event in result.events]


async def test_an_admitted_turn_runs_and_reports_its_events() -> None:
    world = make_world(ALICE_TURN, ALICE_READ)
    world.register_files(output="q3 report")
    seen: list[TurnRequest] = []

    async def script(turn: TurnRequest, host: RuntimeHost) -> JsonValue:
        seen.append(turn)
        result = await host.call("files.read", {"name": "q3"})
        assert result.status == "succeeded"
        return {"report": result.output}

    executor, _ = scripted(world, script)
    result = await executor.execute(execution(state={"n": 1}), attempt=2)
    assert result.status == "succeeded" and result.output == {"report": "q3 report"}
    assert event_types(result) == ["turn.started", "tool.invoked", "turn.ended"]
    assert [e.sequence for e in result.events] == [0, 1, 2]
    [turn] = seen
    assert (turn.agent, turn.attempt, turn.state, turn.trace_id) == (ALICE, 2, {"n": 1}, TRACE)
    assert [t.name for t in turn.tools] == ["files.read"] and turn.message.id == "m-1"
    fields = {f.name for f in dataclasses.fields(TurnRequest)}
    assert not fields & {"context", "grants", "authority", "owner"}  # never authority
    [handled] = world.handled
    assert handled.trace_id == TRACE  # host.call stamps the turn's trace
    assert [e.type for e in world.audit.events if e.type.startswith("turn.")] == [
        "turn.admitted", "turn.ended"]


@pytest.mark.parametrize(("forged", "code"), [
    ({"actor": BOB}, "actor_mismatch"),  # the actor is the sender, not the executing agent
    ({"agent": BOB, "actor": ALICE}, "actor_mismatch"),
    ({"receiver": CAROL}, "receiver_mismatch"),
    ({"purpose": "other-purpose"}, "message_context_mismatch"),
    ({"trace": "t-forged"}, "message_context_mismatch"),
])
async def test_envelope_mismatches_deny_without_starting(forged: dict[str, Any],
                                                         code: str) -> None:
    world = make_world(ALICE_TURN, invoke_grant("g-inv-bob", BOB))
    executor, runtime = scripted(world, answer)
    result = await executor.execute(execution(**forged))
    assert result.status == "denied" and result.error.code == code
    assert runtime.runs == 0 and event_types(result) == ["turn.denied"]
    assert world.audit_of("authorization.checked") == []  # refused before admission
    assert world.audit_of("turn.denied")[0].reason == code


async def test_admission_needs_the_invoke_grant() -> None:
    world = make_world(ALICE_READ)
    executor, runtime = scripted(world, answer)
    result = await executor.execute(execution())
    assert result.status == "denied" and result.error.code == "no_matching_grant"
    assert runtime.runs == 0


async def test_admission_consumes_one_use() -> None:
    world = make_world(invoke_grant("g-inv-alice", ALICE, max_uses=1))
    executor, runtime = scripted(world, answer)
    assert (await executor.execute(execution())).status == "succeeded"
    second = await executor.execute(execution())
    assert second.status == "denied" and second.error.code == "grant_exhausted"
    assert runtime.runs == 1


async def test_audit_failure_at_admission_never_starts_the_runtime() -> None:
    world = make_world(ALICE_TURN)
    world.audit.fail = True
    executor, runtime = scripted(world, answer)
    result = await executor.execute(execution())
    assert result.status == "denied" and result.error.code == "audit_unavailable"
    assert runtime.runs == 0


class _FailOn:
    """An audit sink that refuses one event type and passes the rest on."""

    def __init__(self, inner: Any, type: str) -> None:
        self.inner, self.type = inner, type

    async def record(self, event: AuditEvent, /) -> None:
        if event.type == self.type:
            raise AuditUnavailable("refused for the test")
        await self.inner.record(event)


async def test_unwritable_admission_record_fails_before_the_runtime() -> None:
    world = make_world(ALICE_TURN)
    world.kernel.audit = _FailOn(world.audit, "turn.admitted")
    executor, runtime = scripted(world, answer)
    result = await executor.execute(execution())
    assert result.status == "failed" and result.error.code == "audit_unavailable"
    assert runtime.runs == 0 and event_types(result) == ["turn.ended"]


async def test_the_requesters_grants_never_reach_the_recipients_turn() -> None:
    world = make_world(ALICE_TURN, BOB_READ)  # bob (the requester) may read; alice may not
    world.register_files()
    results: list[ToolResult] = []

    async def script(turn: TurnRequest, host: RuntimeHost) -> JsonValue:
        results.append(await host.call("files.read", {}))
        return [t.name for t in turn.tools]

    executor, _ = scripted(world, script)
    result = await executor.execute(execution())
    assert result.status == "succeeded" and result.output == []
    [refused] = results
    assert refused.status == "denied" and refused.error.code == "tool_unavailable"
    assert world.handled == []
    # even a host that offered it would be refused by the kernel under alice's context
    direct = await world.kernel.invoke_tool(context(ALICE), tool_call("files.read", {}))
    assert direct.status == "denied" and world.handled == []
    assert (await world.kernel.invoke_tool(context(BOB), tool_call("files.read", {}))).status == (
        "succeeded")  # the grant is real: bob's own context may use it


async def test_offered_tools_are_the_kernel_list_intersected_with_the_request() -> None:
    write = file_tool("files.write", action="write")
    world = make_world(ALICE_TURN, ALICE_READ,
                       grant("g-w", ALICE, "files", ["reports"], ["write"]))
    world.register_files()
    world.register_files(write)
    codes: list[str] = []

    async def script(turn: TurnRequest, host: RuntimeHost) -> JsonValue:
        for name in ("files.write", "files.read"):
            result = await host.call(name, {})
            codes.append(result.error.code if result.status != "succeeded" else "succeeded")
        return [t.name for t in turn.tools]

    executor, _ = scripted(world, script)
    result = await executor.execute(execution(tools=(file_tool(),)))
    assert result.status == "succeeded" and result.output == ["files.read"]
    assert codes == ["tool_unavailable", "succeeded"]
    assert [c.tool for c in world.handled] == ["files.read"]


async def test_messages_request_inside_a_turn_speaks_as_the_recipient() -> None:
    world = make_world(ALICE_TURN, send_grant("g-alice-carol", ALICE, CAROL),
                       send_grant("g-bob-carol", BOB, CAROL))
    assert world.transport is not None

    async def script(turn: TurnRequest, host: RuntimeHost) -> JsonValue:
        result = await host.call(MESSAGES_REQUEST, {"recipient": CAROL.to_wire(), "payload": 1})
        return result.status

    executor, _ = scripted(world, script)
    result = await executor.execute(execution(tools=(MESSAGES_REQUEST_TOOL,)))
    assert result.status == "succeeded" and result.output == "succeeded"
    [sent] = world.transport.envelopes
    assert sent.sender == ALICE and sent.trace_id == TRACE


async def test_tool_call_limit_refuses_and_the_turn_goes_on() -> None:
    world = make_world(ALICE_TURN, ALICE_READ)
    world.register_files()

    async def script(turn: TurnRequest, host: RuntimeHost) -> JsonValue:
        return [(await host.call("files.read", {})).status for _ in range(3)]

    executor, _ = scripted(world, script)
    result = await executor.execute(execution(options={"maxSteps": 5, "maxToolCalls": 1}))
    assert result.status == "succeeded" and result.output == ["succeeded", "denied", "denied"]
    assert len(world.handled) == 1
    codes = [e.data.get("code") for e in result.events if e.type == "tool.invoked"]
    assert codes == [None, "tool_call_limit_exceeded", "tool_call_limit_exceeded"]


async def test_the_call_ceiling_counts_unoffered_calls_too() -> None:
    """ADR 0012: every call counts, so guessing tool names spends the same ceiling."""
    world = make_world(ALICE_TURN, ALICE_READ)
    world.register_files()
    codes: list[str | None] = []

    async def script(turn: TurnRequest, host: RuntimeHost) -> JsonValue:
        for name in ("no.such.tool", "files.secret", "files.read"):
            result = await host.call(name, {})
            codes.append(result.error.code if result.status != "succeeded" else None)
        return None

    executor, _ = scripted(world, script)
    result = await executor.execute(execution(options={"maxToolCalls": 2}))
    assert result.status == "succeeded"
    assert codes == ["tool_unavailable", "tool_unavailable", "tool_call_limit_exceeded"]
    assert world.handled == []
    refused = [e for e in world.audit_of("tool.invoked") if e.reason == "tool_call_limit_exceeded"]
    assert [e.cause for e in refused] == ["tool_call_limit"]


async def test_undeclared_steps_are_bounded_by_the_call_ceiling_alone() -> None:
    world = make_world(ALICE_TURN, ALICE_READ)
    world.register_files()

    async def script(turn: TurnRequest, host: RuntimeHost) -> JsonValue:
        assert (host.limits.max_steps, host.limits.max_tool_calls) == (1, 4)
        return [(await host.call("files.read", {})).status for _ in range(5)]

    executor, _ = scripted(world, script)
    result = await executor.execute(execution(options={"maxSteps": 1, "maxToolCalls": 4}))
    assert result.output == ["succeeded"] * 4 + ["denied"]
    assert len(world.handled) == 4


async def test_declared_steps_past_the_limit_are_refused_per_call() -> None:
    world = make_world(ALICE_TURN, ALICE_READ)
    world.register_files()
    seen: list[tuple[int, str | None]] = []

    async def script(turn: TurnRequest, host: RuntimeHost) -> JsonValue:
        for _ in range(3):
            step = host.declare_step()
            for name in ("files.read", "no.such.tool"):
                result = await host.call(name, {})
                seen.append((step, result.error.code if result.status != "succeeded" else None))
        return None

    executor, _ = scripted(world, script)
    result = await executor.execute(execution(options={"maxSteps": 2, "maxToolCalls": 100}))
    assert result.status == "succeeded"
    assert seen == [(0, None), (0, "tool_unavailable"), (1, None), (1, "tool_unavailable"),
                    (2, "step_limit_exceeded"), (2, "step_limit_exceeded")]
    assert len(world.handled) == 2
    steps = [e.data.get("step") for e in result.events if e.type == "tool.invoked"]
    assert steps == [0, 0, 1, 1, 2, 2]


async def test_timeout_cancels_the_turn() -> None:
    world = make_world(ALICE_TURN)

    async def script(turn: TurnRequest, host: RuntimeHost) -> JsonValue:
        await anyio.sleep_forever()
        return None

    executor, _ = scripted(world, script)
    with anyio.fail_after(5):
        result = await executor.execute(execution(options={"timeoutMs": 20}))
    assert result.status == "cancelled"
    assert result.error is not None and result.error.code == "turn_cancelled"
    assert world.audit_of("turn.ended")[0].reason == "turn_cancelled"


async def test_host_cancellation_propagates_and_is_audited() -> None:
    world = make_world(ALICE_TURN)
    started = anyio.Event()
    results: list[ExecutionResult] = []

    async def script(turn: TurnRequest, host: RuntimeHost) -> JsonValue:
        started.set()
        await anyio.sleep_forever()
        return None

    executor, _ = scripted(world, script)

    async def run() -> None:
        results.append(await executor.execute(execution()))

    with anyio.fail_after(5):
        async with anyio.create_task_group() as tg:
            tg.start_soon(run)
            await started.wait()
            tg.cancel_scope.cancel()
    assert results == []
    assert world.audit_of("turn.ended")[0].reason == "turn_cancelled"


async def test_runtime_exception_fails_without_its_text() -> None:
    world = make_world(ALICE_TURN)

    async def script(turn: TurnRequest, host: RuntimeHost) -> JsonValue:
        raise RuntimeError("s3cr3t-trace")

    executor, _ = scripted(world, script)
    result = await executor.execute(execution())
    assert result.status == "failed" and result.error.code == "runtime_failed"
    assert "s3cr3t" not in result.to_json()
    assert event_types(result) == ["turn.started", "turn.ended"]


@pytest.mark.parametrize("output", [{1, 2}, math.nan, ("tuple",), object()])
async def test_non_json_output_is_an_invalid_outcome(output: Any) -> None:
    world = make_world(ALICE_TURN)

    async def script(turn: TurnRequest, host: RuntimeHost) -> JsonValue:
        return output

    executor, _ = scripted(world, script)
    result = await executor.execute(execution())
    assert result.status == "failed" and result.error.code == "invalid_runtime_outcome"


async def test_state_is_a_private_copy() -> None:
    world = make_world(ALICE_TURN)
    request = execution(state={"items": [1]})

    async def script(turn: TurnRequest, host: RuntimeHost) -> JsonValue:
        assert turn.state is not None
        turn.state["items"].append(2)
        return None

    executor, _ = scripted(world, script)
    await executor.execute(request)
    assert request.state == {"items": [1]}


async def test_malformed_requests_raise() -> None:
    world = make_world(ALICE_TURN)
    executor, runtime = scripted(world, answer)
    wire = execution().to_wire()
    assert (await executor.execute(wire)).status == "succeeded"  # a mapping is parsed
    with pytest.raises(UnsupportedProtocolVersion):
        await executor.execute({**wire, "version": "1"})
    with pytest.raises(ContractError):
        await executor.execute({**wire, "grants": []})
    assert runtime.runs == 1


async def test_annotations_reach_the_record_on_every_ending() -> None:
    """ADR 0027: what a runtime states survives its own failure and the deadline."""
    world = make_world(ALICE_TURN)
    kept: list[RuntimeHost] = []

    async def script(turn: TurnRequest, host: RuntimeHost) -> JsonValue:
        kept.append(host)
        host.annotate("promptHash", "abc")
        host.annotate("promptHash", "def")  # the last write wins
        for bad in ("", "runtime"):
            with pytest.raises(ContractError):
                host.annotate(bad, 1)
        with pytest.raises(ContractError):
            host.annotate("x", math.nan)
        mode = turn.message.payload
        if mode == "fail":
            raise KeyError("boom")
        if mode == "hang":
            await anyio.sleep_forever()
        return "ok"

    executor, _ = scripted(world, script)
    for mode, status in (("ok", "succeeded"), ("fail", "failed"), ("hang", "cancelled")):
        request = execution(options={"timeoutMs": 50})
        message = request.message.model_copy(update={"payload": mode})
        result = await executor.execute(request.model_copy(update={"message": message}))
        assert result.status == status and result.metadata == {"promptHash": "def"}
    kept[0].annotate("late", 1)  # after the turn closed: dropped, no error
    plain = await scripted(world, answer)[0].execute(execution())
    assert plain.metadata is None
