"""A pydantic-ai Agent as the turn's model loop, driven by pydantic-ai's own FunctionModel.

Its tools are the turn's (aliased, with their schemas), every call goes through
the envelope, each model request is a declared step, and failures are typed.
"""

from __future__ import annotations

import json
from typing import Any

import anyio
import pytest
from pydantic_ai import Agent
from pydantic_ai.exceptions import ModelHTTPError
from pydantic_ai.messages import (
    ModelMessage,
    ModelResponse,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel

from sharedos_redis.kernel.contracts import ExecutionResult
from sharedos_redis.kernel.messaging import MESSAGES_REQUEST_TOOL
from sharedos_redis.kernel.turn import TurnExecutor
from sharedos_redis.model.pydantic_ai_agent import PydanticAIRuntime
from tests.kernel.kernel_world import (
    ALICE,
    CAROL,
    World,
    file_tool,
)
from tests.kernel.test_turn import execution
from tests.model.worlds import alice_world

pytestmark = pytest.mark.anyio

ASK_CAROL = {"recipient": CAROL.to_wire(), "payload": {"q": "notes?"}}


def world() -> World:
    return alice_world(output="report")


def returns(messages: list[ModelMessage]) -> list[Any]:
    return [part.content for m in messages for part in getattr(m, "parts", ())
            if isinstance(part, ToolReturnPart)]


def invoked(result: ExecutionResult) -> list[dict[str, Any]]:
    return [e.data for e in result.events if e.type == "tool.invoked"]  # type: ignore[misc]


async def run(model: FunctionModel, built: World,
              options: dict[str, int] | None = None) -> ExecutionResult:
    executor = TurnExecutor(built.kernel, PydanticAIRuntime(Agent(model)))
    with anyio.fail_after(10):
        return await executor.execute(execution(tools=(file_tool(), MESSAGES_REQUEST_TOOL),
                                                options=options))


async def test_the_agent_calls_messages_request_through_the_envelope() -> None:
    seen: list[list[str]] = []

    def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        seen.append(sorted(tool.name for tool in info.function_tools))
        done = returns(messages)
        if not done:
            return ModelResponse(parts=[ToolCallPart("messages_request", ASK_CAROL, "call_0")])
        return ModelResponse(parts=[TextPart(f"carol: {json.dumps(done[0])}")])

    built = world()
    assert built.transport is not None
    result = await run(FunctionModel(model), built)
    assert result.status == "succeeded"
    assert result.output == 'carol: {"status": "succeeded", "output": {"status": "green"}}'
    assert seen[0] == ["files_read", "messages_request"]
    [sent] = built.transport.envelopes
    assert sent.sender == ALICE and sent.trace_id == "t-1"
    assert [e["step"] for e in invoked(result)] == [0]


async def test_forged_fields_are_refused_and_returned_to_the_agent() -> None:
    def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        done = returns(messages)
        if not done:
            forged = {**ASK_CAROL, "traceId": "t-other"}
            return ModelResponse(parts=[ToolCallPart("messages_request", forged, "c1")])
        return ModelResponse(parts=[TextPart(done[0]["error"]["code"])])

    built = world()
    assert built.transport is not None
    result = await run(FunctionModel(model), built)
    assert result.output == "invalid_tool_arguments" and built.transport.calls == 0


async def test_steps_are_declared_per_request_and_refused_past_the_budget() -> None:
    def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        return ModelResponse(parts=[ToolCallPart("files_read", {}, "c")])

    built = world()
    result = await run(FunctionModel(model), built, options={"maxSteps": 2, "maxToolCalls": 50})
    assert result.status == "failed" and result.error is not None
    assert result.error.code == "invalid_driver_decision"  # it would not stop at maxSteps + 2
    assert len(built.handled) == 2
    codes = [e.get("code") for e in invoked(result)]
    assert codes == [None, None, "step_limit_exceeded", "step_limit_exceeded"]


async def test_provider_errors_fail_the_turn_driver_failed() -> None:
    def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        raise ModelHTTPError(429, "test-model")

    result = await run(FunctionModel(model), world())
    assert result.status == "failed" and result.error is not None
    assert result.error.code == "driver_failed"
