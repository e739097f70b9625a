"""The standard model runtime over the scripted driver, inside the kernel's envelope.

What the model sees, how its calls are counted and refused, how the loop ends
at the limits, hostile output, provider failures and cancellation. In-memory
kernel world; no network.
"""

from __future__ import annotations

import json
from typing import Any

import anyio
import pytest
from pydantic import BaseModel

from sharedos_redis.errors import ModelCallFailed
from sharedos_redis.kernel.contracts import ExecutionResult, ToolDefinition
from sharedos_redis.kernel.messaging import MESSAGES_REQUEST_TOOL
from sharedos_redis.kernel.turn import TurnExecutor
from sharedos_redis.model import (
    ModelRequest,
    ModelResponse,
    RetryPolicy,
    ScriptedDriver,
    StandardRuntime,
    ToolResultMessage,
    reply,
    tool_call,
)
from tests.kernel.kernel_world import (
    ALICE,
    CAROL,
    World,
    file_tool,
    grant,
    invoke_grant,
    make_world,
    send_grant,
)
from tests.kernel.test_turn import execution

pytestmark = pytest.mark.anyio

TURN = invoke_grant("g-inv-alice", ALICE)
READ = grant("g-alice-read", ALICE, "files", ["reports"], ["read"])
TOOLS = (file_tool(), MESSAGES_REQUEST_TOOL)


async def run(world: World, driver: ScriptedDriver, *, options: dict[str, int] | None = None,
              tools: tuple[ToolDefinition, ...] = TOOLS, **runtime: Any) -> ExecutionResult:
    executor = TurnExecutor(world.kernel, StandardRuntime(driver, **runtime))
    with anyio.fail_after(10):
        return await executor.execute(execution(tools=tools, options=options))


def results(request: ModelRequest) -> list[dict[str, Any]]:
    """The tool results the model was shown in ``request``, decoded."""
    return [json.loads(m.content) for m in request.messages if isinstance(m, ToolResultMessage)]


def codes(request: ModelRequest) -> list[str | None]:
    return [r.get("error", {}).get("code") for r in results(request)]


def invoked(result: ExecutionResult) -> list[dict[str, Any]]:
    return [e.data for e in result.events if e.type == "tool.invoked"]  # type: ignore[misc]


async def test_the_model_sees_its_tools_and_purpose_never_its_grants() -> None:
    world = make_world(TURN, READ, send_grant("g-alice-carol", ALICE, CAROL))
    world.register_files(output={"text": "Atlas is green"})
    driver = ScriptedDriver([reply("", tool_call("files.read", {"path": "atlas.md"})),
                             reply("Atlas is green.")])
    result = await run(world, driver, instructions="You are Alice, the Atlas lead.")
    assert result.status == "succeeded" and result.output == "Atlas is green."
    first, second = driver.requests
    assert [t.name for t in first.tools] == ["files_read", "messages_request"]
    assert first.tools[1].parameters == dict(MESSAGES_REQUEST_TOOL.input_schema)
    assert first.system.startswith("You are Alice, the Atlas lead.")
    assert "atlas-status" in first.system and "g-alice-read" not in first.system
    assert "Atlas status?" in first.messages[0].text  # type: ignore[union-attr]
    assert (first.step, second.step, first.max_steps) == (0, 1, 16)
    assert results(second) == [{"status": "succeeded", "output": {"text": "Atlas is green"}}]
    [call] = world.handled
    assert call.tool == "files.read" and call.arguments == {"path": "atlas.md"}
    assert call.id != "call_0" and call.trace_id == "t-1"  # a fresh id, the turn's trace
    assert [e["step"] for e in invoked(result)] == [0]


async def test_parallel_calls_run_in_order_and_each_result_goes_back() -> None:
    world = make_world(TURN, READ, send_grant("g-alice-carol", ALICE, CAROL))
    world.register_files()
    ask = {"recipient": CAROL.to_wire(), "payload": {"q": 1}}
    driver = ScriptedDriver([
        reply("", tool_call("messages.request", ask, id="call_0"),
              tool_call("files.read", {}, id="call_0")),  # provider ids need not be unique
        reply("done")])
    result = await run(world, driver)
    assert result.output == "done"
    assert [e["tool"] for e in invoked(result)] == ["messages.request", "files.read"]
    assert [r["status"] for r in results(driver.requests[1])] == ["succeeded", "succeeded"]
    assert results(driver.requests[1])[0]["output"] == {"status": "green"}


async def test_call_ceiling_refusals_reach_the_model_then_it_answers() -> None:
    world = make_world(TURN, READ)
    world.register_files()
    calls = [tool_call("files.read", {}) for _ in range(3)]
    driver = ScriptedDriver([reply("", *calls), reply("", tool_call("files.read", {})),
                             reply("two reports read")])
    result = await run(world, driver, options={"maxSteps": 10, "maxToolCalls": 2})
    assert result.status == "succeeded" and result.output == "two reports read"
    assert len(world.handled) == 2
    assert codes(driver.requests[1]) == [None, None, "tool_call_limit_exceeded"]
    answer = driver.requests[2]
    assert answer.tool_choice == "none" and "answer now" in answer.system
    assert codes(answer)[-1] == "tool_call_limit_exceeded"
    assert [e.get("code") for e in invoked(result)] == [
        None, None, "tool_call_limit_exceeded", "tool_call_limit_exceeded"]


async def test_a_model_that_keeps_going_past_its_steps_is_refused_then_answers() -> None:
    world = make_world(TURN, READ)
    world.register_files()

    def keep_calling(request: ModelRequest) -> ModelResponse:
        if request.tool_choice == "none":
            return reply("stopping: out of steps")
        return reply("", tool_call("files.read", {}))

    driver = ScriptedDriver(keep_calling)
    result = await run(world, driver, options={"maxSteps": 2, "maxToolCalls": 50})
    assert result.status == "succeeded" and result.output == "stopping: out of steps"
    assert len(world.handled) == 2  # steps 0 and 1 acted
    assert len(driver.requests) == 2 + 2  # max_steps + the refused step + the answer step
    assert codes(driver.requests[3]) == [None, None, "step_limit_exceeded"]
    assert [r.step for r in driver.requests] == [0, 1, 2, 3]
    assert "0 of 2 steps" in driver.requests[2].system


async def test_answer_step_calls_are_still_refused_and_recorded() -> None:
    world = make_world(TURN, READ)
    world.register_files()
    driver = ScriptedDriver(lambda request: reply("insisting", tool_call("files.read", {})))
    result = await run(world, driver, options={"maxSteps": 1, "maxToolCalls": 10})
    assert result.status == "succeeded" and result.output == "insisting"
    assert len(world.handled) == 1
    assert [e.get("code") for e in invoked(result)] == [
        None, "step_limit_exceeded", "step_limit_exceeded"]


async def test_unoffered_tool_and_bad_arguments_come_back_typed_and_the_model_recovers() -> None:
    world = make_world(TURN, READ, send_grant("g-alice-carol", ALICE, CAROL))
    world.register_files()
    assert world.transport is not None
    forged = {"recipient": CAROL.to_wire(), "payload": 1, "sender": {"kind": "agent",
              "agentId": "root"}, "traceId": "other-trace"}
    driver = ScriptedDriver([
        reply("", tool_call("files.delete", {}), tool_call("messages.request", forged)),
        reply("", tool_call("messages.request", {"recipient": CAROL.to_wire(), "payload": 1})),
        reply("carol answered")])
    result = await run(world, driver)
    assert result.output == "carol answered"
    assert codes(driver.requests[1]) == ["tool_unavailable", "invalid_tool_arguments"]
    assert codes(driver.requests[2])[-1] is None
    [sent] = world.transport.envelopes  # only the recovered call reached the transport
    assert sent.sender == ALICE and sent.trace_id == "t-1"


@pytest.mark.parametrize("arguments", [
    "{not json", "[1, 2]", '"text"', '{"a": NaN}', "[" * 100_000 + "]" * 100_000,
    json.dumps({"recipient": {"kind": "agent", "agentId": "carol"}, "payload": "x" * 10_000_000}),
], ids=["invalid-json", "array", "string", "nan", "deep", "10MB"])
async def test_hostile_arguments_are_refused_before_the_host(arguments: str) -> None:
    world = make_world(TURN, send_grant("g-alice-carol", ALICE, CAROL))
    assert world.transport is not None
    driver = ScriptedDriver([reply("", tool_call("messages.request", arguments)),
                             reply("gave up")])
    result = await run(world, driver)
    assert result.output == "gave up"
    assert codes(driver.requests[1]) == ["invalid_tool_arguments"]
    assert invoked(result) == [] and world.transport.calls == 0
    assert {e.action for e in world.audit_of("authorization.checked")} == {"invoke"}  # no send


async def test_endless_malformed_calls_fail_the_turn_as_an_invalid_decision() -> None:
    world = make_world(TURN)
    driver = ScriptedDriver(lambda r: reply("", *[tool_call("files.read", "{") for _ in range(3)]))
    result = await run(world, driver, max_malformed_calls=4)
    assert result.status == "failed" and result.error is not None
    assert result.error.code == "invalid_driver_decision"
    assert len(driver.requests) == 2
    assert result.metadata is not None
    assert result.metadata["modelUsage"]["malformedToolCalls"] == 5  # type: ignore[index]


class Status(BaseModel):
    status: str
    confidence: float


async def test_declared_output_schema_is_validated() -> None:
    good = await run(make_world(TURN), ScriptedDriver(
        [reply('```json\n{"status": "green", "confidence": 0.9}\n```')]), output_model=Status)
    assert good.status == "succeeded" and good.output == {"status": "green", "confidence": 0.9}
    bad = await run(make_world(TURN), ScriptedDriver([reply("all green")]), output_model=Status)
    assert bad.status == "failed" and bad.error is not None
    assert bad.error.code == "invalid_runtime_outcome"


async def test_refusal_and_truncation() -> None:
    refused = await run(make_world(TURN), ScriptedDriver([reply(refusal="I can't help")]))
    assert refused.output == {"refusal": "I can't help"}
    cut = await run(make_world(TURN), ScriptedDriver([ModelResponse(text="Atl", truncated=True)]))
    assert cut.status == "failed" and cut.error is not None
    assert cut.error.code == "invalid_driver_decision"


async def test_retryable_provider_failures_are_retried_then_succeed() -> None:
    attempts: list[int] = []

    def flaky(request: ModelRequest) -> ModelResponse:
        attempts.append(request.step)
        if len(attempts) < 3:
            raise ModelCallFailed("rate_limited", retryable=True, status=429, retry_after_s=0)
        return reply("ok")

    result = await run(make_world(TURN), ScriptedDriver(flaky),
                       retry=RetryPolicy(max_attempts=3, base_delay_s=0))
    assert result.status == "succeeded" and attempts == [0, 0, 0]


@pytest.mark.parametrize("failure", [
    ModelCallFailed("bad_request", retryable=False, status=400),
    ModelCallFailed("unavailable", retryable=True, status=503),
    KeyError("driver bug"),
], ids=["not-retryable", "retries-exhausted", "broken-driver"])
async def test_provider_failures_end_the_turn_driver_failed(failure: Exception) -> None:
    def failing(request: ModelRequest) -> ModelResponse:
        raise failure

    result = await run(make_world(TURN), ScriptedDriver(failing),
                       retry=RetryPolicy(max_attempts=2, base_delay_s=0))
    assert result.status == "failed" and result.error is not None
    assert result.error.code == "driver_failed"
    assert "driver bug" not in result.to_json()


async def test_a_retry_that_would_outlive_the_deadline_is_not_made() -> None:
    def slow_down(request: ModelRequest) -> ModelResponse:
        raise ModelCallFailed("rate_limited", retryable=True, status=429, retry_after_s=30)

    with anyio.fail_after(3):  # no 30 s sleep: the turn's deadline is 2 s
        result = await run(make_world(TURN), ScriptedDriver(slow_down),
                           options={"timeoutMs": 2000}, retry=RetryPolicy(max_delay_s=60))
    assert result.status == "failed" and result.error is not None
    assert result.error.code == "driver_failed"


async def test_the_deadline_cancels_the_in_flight_model_call() -> None:
    cancelled = anyio.Event()

    async def hang(request: ModelRequest) -> ModelResponse:
        try:
            await anyio.sleep_forever()
        except anyio.get_cancelled_exc_class():
            cancelled.set()
            raise
        raise AssertionError("unreachable")

    result = await run(make_world(TURN), ScriptedDriver(hang), options={"timeoutMs": 50})
    assert result.status == "cancelled" and cancelled.is_set()
    assert result.metadata is not None and "promptHash" in result.metadata  # ADR 0027


async def test_ambiguous_tool_aliases_are_never_offered() -> None:
    world = make_world(TURN, READ)
    world.register_files(file_tool("files.read"))
    world.register_files(file_tool("files_read"))
    driver = ScriptedDriver([reply("never")])
    result = await run(world, driver, tools=(file_tool("files.read"), file_tool("files_read")))
    assert result.status == "failed" and driver.requests == []


async def test_past_the_step_budget_malformed_calls_cannot_prolong_the_turn() -> None:
    world = make_world(TURN, READ)
    world.register_files()
    driver = ScriptedDriver(lambda r: reply("enough", tool_call("files.read", "{"),
                                            tool_call("files.read", {})))
    result = await run(world, driver, options={"maxSteps": 2, "maxToolCalls": 50},
                       max_malformed_calls=100)
    assert result.status == "succeeded" and result.output == "enough"
    assert len(driver.requests) == 2 + 2 and len(world.handled) == 2
