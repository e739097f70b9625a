"""The Anthropic Messages driver against mocked HTTP (the SDK's own client).

Request bodies are checked against the documented tool-use format: ``tools``
with ``input_schema``, ``tool_choice`` objects, ``tool_use`` blocks replayed in
the assistant turn, and all of one reply's ``tool_result`` blocks in the next
user turn with ``tool_use_id`` and ``is_error``.
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

from .providers import FakeProvider, anthropic_driver, anthropic_message, error

pytestmark = pytest.mark.anyio

ASK_CAROL = {"recipient": CAROL.to_wire(), "payload": {"q": "notes?"}}


world = alice_world


async def run(provider: FakeProvider, built: World | None = None,
              options: dict[str, int] | None = None) -> ExecutionResult:
    runtime = StandardRuntime(anthropic_driver(provider), instructions="You are Alice.",
                              retry=RetryPolicy(base_delay_s=0))
    executor = TurnExecutor((built or world()).kernel, runtime)
    with anyio.fail_after(10):
        return await executor.execute(execution(tools=(file_tool(), MESSAGES_REQUEST_TOOL),
                                                options=options))


async def test_parallel_tool_use_round_trip_matches_the_messages_format() -> None:
    provider = FakeProvider([
        anthropic_message("Asking carol.", ("toolu_1", "messages_request", ASK_CAROL),
                          ("toolu_2", "files_read", {"path": "atlas.md"})),
        anthropic_message("Carol and the report agree: green.")])
    result = await run(provider)
    assert result.status == "succeeded" and result.output == "Carol and the report agree: green."
    first, second = provider.bodies
    assert provider.paths == ["/v1/messages"] * 2
    assert first["model"] == "claude-test" and first["max_tokens"] == 512
    assert first["system"].startswith("You are Alice.")
    assert first["tool_choice"] == {"type": "auto"}
    assert first["messages"] == [{"role": "user", "content": first["messages"][0]["content"]}]
    assert {"name": "messages_request", "description": MESSAGES_REQUEST_TOOL.description,
            "input_schema": MESSAGES_REQUEST_TOOL.input_schema} in first["tools"]
    assistant, results = second["messages"][1:]
    assert assistant == {"role": "assistant", "content": [
        {"type": "text", "text": "Asking carol."},
        {"type": "tool_use", "id": "toolu_1", "name": "messages_request", "input": ASK_CAROL},
        {"type": "tool_use", "id": "toolu_2", "name": "files_read",
         "input": {"path": "atlas.md"}}]}
    assert results["role"] == "user"
    assert [(b["type"], b["tool_use_id"], b["is_error"]) for b in results["content"]] == [
        ("tool_result", "toolu_1", False), ("tool_result", "toolu_2", False)]
    assert json.loads(results["content"][0]["content"])["output"] == {"status": "green"}


async def test_refused_calls_are_tool_results_with_is_error() -> None:
    built = world()
    assert built.transport is not None
    forged = {**ASK_CAROL, "sender": {"kind": "agent", "agentId": "root"}}
    provider = FakeProvider([
        anthropic_message(None, ("toolu_1", "messages_request", forged),
                          ("toolu_2", "shell_exec", {"cmd": "id"})),
        anthropic_message("Nothing I can do.")])
    result = await run(provider, built)
    assert result.output == "Nothing I can do."
    blocks = provider.bodies[1]["messages"][-1]["content"]
    assert [b["is_error"] for b in blocks] == [True, True]
    assert [json.loads(b["content"])["error"]["code"] for b in blocks] == [
        "invalid_tool_arguments", "tool_unavailable"]
    assert built.transport.calls == 0


async def test_answer_step_sends_tool_choice_none() -> None:
    provider = FakeProvider([anthropic_message(None, ("t1", "files_read", {})),
                             anthropic_message(None, ("t2", "files_read", {})),
                             anthropic_message("stopping")])
    result = await run(provider, options={"maxSteps": 1, "maxToolCalls": 9})
    assert result.output == "stopping"
    assert [b["tool_choice"] for b in provider.bodies] == [
        {"type": "auto"}, {"type": "auto"}, {"type": "none"}]
    last = provider.bodies[2]["messages"][-1]["content"][-1]
    assert json.loads(last["content"])["error"]["code"] == "step_limit_exceeded"


async def test_refusal_and_max_tokens_stop_reasons() -> None:
    refused = await run(FakeProvider([anthropic_message("I won't.", stop="refusal")]))
    assert refused.output == {"refusal": "I won't."}
    cut = await run(FakeProvider([anthropic_message("Atl", stop="max_tokens")]))
    assert cut.status == "failed" and cut.error is not None
    assert cut.error.code == "invalid_driver_decision"


async def test_overloaded_is_retried() -> None:
    provider = FakeProvider([error(529), error(429, retry_after="0"), anthropic_message("ok")])
    result = await run(provider)
    assert result.output == "ok" and len(provider.bodies) == 3


@pytest.mark.parametrize("answer", [
    error(400), error(403), httpx2.Response(200, json={"type": "message"}),
], ids=["bad-request", "forbidden", "unreadable"])
async def test_provider_errors_fail_the_turn_driver_failed(answer: httpx2.Response) -> None:
    provider = FakeProvider(lambda body: answer)
    result = await run(provider)
    assert result.status == "failed" and result.error is not None
    assert result.error.code == "driver_failed" and len(provider.bodies) == 1


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
