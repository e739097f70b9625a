"""The OpenAI-compatible Chat Completions driver against mocked HTTP (the SDK's own client).

Request bodies are checked against the documented tool-calling format: function
tools, ``tool_choice``, the assistant's ``tool_calls`` replayed, one ``tool``
message per call with its ``tool_call_id``.
"""

from __future__ import annotations

import json
from typing import Any

import anyio
import httpx2
import pytest

from sharedos_redis.kernel.contracts import ExecutionResult
from sharedos_redis.kernel.messaging import MESSAGES_REQUEST_TOOL
from sharedos_redis.kernel.turn import TurnExecutor
from sharedos_redis.model import RetryPolicy, StandardRuntime
from tests.kernel.kernel_world import (
    CAROL,
    World,
    file_tool,
)
from tests.kernel.test_turn import execution
from tests.model.worlds import alice_world

from .providers import FakeProvider, chat_completion, error, openai_driver

pytestmark = pytest.mark.anyio

ASK_CAROL = json.dumps({"recipient": CAROL.to_wire(), "payload": {"q": "notes?"}})


world = alice_world


async def run(provider: FakeProvider, built: World | None = None,
              options: dict[str, int] | None = None, **runtime: Any) -> ExecutionResult:
    runtime.setdefault("retry", RetryPolicy(base_delay_s=0))
    executor = TurnExecutor((built or world()).kernel,
                            StandardRuntime(openai_driver(provider), **runtime))
    with anyio.fail_after(10):
        return await executor.execute(execution(tools=(file_tool(), MESSAGES_REQUEST_TOOL),
                                                options=options))


async def test_tool_call_round_trip_matches_the_chat_completions_format() -> None:
    provider = FakeProvider([
        chat_completion(None, ("call_0", "messages_request", ASK_CAROL)),
        chat_completion("Carol says green.")])
    result = await run(provider, instructions="You are Alice.")
    assert result.status == "succeeded" and result.output == "Carol says green."
    first, second = provider.bodies
    assert provider.paths == ["/v1/chat/completions"] * 2
    assert first["model"] == "gpt-test" and first["tool_choice"] == "auto"
    assert first["messages"][0]["role"] == "system"
    assert first["messages"][0]["content"].startswith("You are Alice.")
    assert first["messages"][1]["role"] == "user"
    request_tool = next(t for t in first["tools"] if t["function"]["name"] == "messages_request")
    assert request_tool == {"type": "function", "function": {
        "name": "messages_request", "description": MESSAGES_REQUEST_TOOL.description,
        "parameters": MESSAGES_REQUEST_TOOL.input_schema}}
    assistant, tool = second["messages"][2:]
    assert assistant == {"role": "assistant", "content": None, "tool_calls": [
        {"id": "call_0", "type": "function",
         "function": {"name": "messages_request", "arguments": ASK_CAROL}}]}
    assert tool["role"] == "tool" and tool["tool_call_id"] == "call_0"
    assert json.loads(tool["content"]) == {"status": "succeeded", "output": {"status": "green"}}
    assert result.metadata is not None
    assert result.metadata["modelUsage"] == {"modelCalls": 2, "malformedToolCalls": 0,
                                             "model": "gpt-test", "inputTokens": 20,
                                             "outputTokens": 10}
    assert len(str(result.metadata["promptHash"])) == 64


async def test_parallel_tool_calls_are_each_answered() -> None:
    provider = FakeProvider([
        chat_completion(None, ("call_a", "files_read", "{}"), ("call_b", "files_delete", "{}"),
                        ("call_c", "messages_request", ASK_CAROL)),
        chat_completion("done")])
    result = await run(provider)
    assert result.output == "done"
    tools = [m for m in provider.bodies[1]["messages"] if m["role"] == "tool"]
    assert [m["tool_call_id"] for m in tools] == ["call_a", "call_b", "call_c"]
    statuses = [json.loads(m["content"]).get("error", {}).get("code") for m in tools]
    assert statuses == [None, "tool_unavailable", None]


async def test_malformed_and_hostile_arguments_never_reach_the_transport() -> None:
    built = world()
    assert built.transport is not None
    forged = json.dumps({"recipient": CAROL.to_wire(), "payload": 1, "traceId": "t-other"})
    provider = FakeProvider([
        chat_completion(None, ("c1", "messages_request", '{"recipient": '),
                        ("c2", "messages_request", forged),
                        ("c3", "messages_request", json.dumps({"payload": "x" * 10_000_000}))),
        chat_completion("I could not ask carol.")])
    result = await run(provider, built)
    assert result.output == "I could not ask carol."
    tools = [json.loads(m["content"]) for m in provider.bodies[1]["messages"]
             if m["role"] == "tool"]
    assert [t["error"]["code"] for t in tools] == ["invalid_tool_arguments"] * 3
    assert built.transport.calls == 0


async def test_a_refusal_is_the_turns_answer() -> None:
    provider = FakeProvider([chat_completion(None, refusal="I can't share that.")])
    result = await run(provider)
    assert result.status == "succeeded" and result.output == {"refusal": "I can't share that."}


async def test_answer_step_sends_tool_choice_none() -> None:
    provider = FakeProvider([chat_completion(None, ("c1", "files_read", "{}")),
                             chat_completion(None, ("c2", "files_read", "{}")),
                             chat_completion("out of budget")])
    result = await run(provider, options={"maxSteps": 5, "maxToolCalls": 1})
    assert result.output == "out of budget"
    assert [b["tool_choice"] for b in provider.bodies] == ["auto", "auto", "none"]
    last_tool = provider.bodies[2]["messages"][-1]
    assert json.loads(last_tool["content"])["error"]["code"] == "tool_call_limit_exceeded"


async def test_rate_limits_and_server_errors_are_retried() -> None:
    provider = FakeProvider([error(429, retry_after="0"), error(500), chat_completion("ok")])
    result = await run(provider)
    assert result.output == "ok" and len(provider.bodies) == 3


@pytest.mark.parametrize("answer", [
    error(400), error(401), error(503),
    httpx2.Response(200, text="<html>gateway</html>"),
    httpx2.Response(200, json={"choices": []}),
], ids=["bad-request", "auth", "unavailable-3x", "not-json", "no-choices"])
async def test_provider_errors_fail_the_turn_driver_failed(answer: httpx2.Response) -> None:
    provider = FakeProvider(lambda body: answer)
    result = await run(provider)
    assert result.status == "failed" and result.error is not None
    assert result.error.code == "driver_failed"
    assert len(provider.bodies) == (3 if answer.status_code == 503 else 1)


async def test_cancellation_reaches_the_in_flight_http_call() -> None:
    cancelled = anyio.Event()

    async def hang(body: dict[str, Any]) -> httpx2.Response:
        try:
            await anyio.sleep_forever()
        except anyio.get_cancelled_exc_class():
            cancelled.set()
            raise
        raise AssertionError("unreachable")

    result = await run(FakeProvider(hang), options={"timeoutMs": 100})
    assert result.status == "cancelled" and cancelled.is_set()
