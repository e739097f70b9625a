"""Bob and alice as model-driven agents: the standard runtime, a driver per ``--model``.

``scripted`` (the default) plays a deterministic model, so the example needs no
network; ``openai:MODEL`` uses any OpenAI-compatible server (``OPENAI_BASE_URL``,
``OPENAI_API_KEY``) and ``anthropic:MODEL`` the Anthropic API
(``ANTHROPIC_API_KEY``). Either way every tool call the model makes goes
through the host, authorized against that agent's own grants; the transcript
lines come from a thin wrapper around the runtime host.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from sharedos_redis.kernel.contracts import JsonValue, ToolCall, ToolResult
from sharedos_redis.kernel.turn import RuntimeHost, RuntimePlugin, TurnLimits, TurnRequest
from sharedos_redis.model import (
    ModelDriver,
    ModelRequest,
    ModelResponse,
    ScriptedDriver,
    StandardRuntime,
    ToolResultMessage,
    reply,
    tool_call,
)

from .transcript import Transcript

__all__ = ["INSTRUCTIONS", "Transcribed", "make_driver", "model_runtime", "scripted_model"]

INSTRUCTIONS = {
    "bob": "You are bob. Ask agent alice for the Atlas project status with the "
           "messages_request tool (recipient {\"kind\": \"agent\", \"agentId\": \"alice\"}), "
           "then report her answer in one sentence.",
    "alice": "You are alice, the Atlas lead. Read atlas.md with the files_read tool and ask "
             "agent carol (recipient {\"kind\": \"agent\", \"agentId\": \"carol\"}) for anything "
             "to add, in parallel if you can; then answer in one or two sentences.",
}


def _results(request: ModelRequest) -> list[dict[str, Any]]:
    return [json.loads(m.content) for m in request.messages if isinstance(m, ToolResultMessage)]


def _shown(result: dict[str, Any]) -> str:
    if result["status"] == "succeeded":
        output = result["output"]
        if isinstance(output, dict) and len(output) == 1:  # {"note": "..."} reads as its text
            output = next(iter(output.values()))
        return output if isinstance(output, str) else json.dumps(output)
    return f"unavailable ({result['error']['code']})"


def scripted_model(request: ModelRequest) -> ModelResponse:
    """A deterministic stand-in for the model: what bob and alice would sensibly do."""
    results = _results(request)
    if "You are bob" in request.system:
        if not results:
            return reply("", tool_call("messages.request", {
                "recipient": {"kind": "agent", "agentId": "alice"},
                "payload": {"question": "What is the Atlas status?"}}))
        return reply(f"Alice: {_shown(results[0])}")
    if not results:
        return reply("", tool_call("files.read", {"path": "atlas.md"}),
                     tool_call("messages.request", {
                         "recipient": {"kind": "agent", "agentId": "carol"},
                         "payload": {"question": "Anything to add on Atlas?"}}))
    status, carol = results[0], results[1]
    text = status["output"].get("text", "?") if status["status"] == "succeeded" else "?"
    return reply(f"{text} Carol: {_shown(carol)}")


def make_driver(spec: str) -> ModelDriver:
    """The driver for ``--model``: ``scripted``, ``openai:MODEL`` or ``anthropic:MODEL``."""
    provider, _, model = spec.partition(":")
    if provider == "scripted":
        return ScriptedDriver(scripted_model)
    if provider == "openai" and model:
        from sharedos_redis.model.openai_chat import OpenAIChatDriver

        return OpenAIChatDriver(model)
    if provider == "anthropic" and model:
        from sharedos_redis.model.anthropic_messages import AnthropicMessagesDriver

        return AnthropicMessagesDriver(model)
    raise ValueError(f"--model must be scripted, openai:MODEL or anthropic:MODEL, not {spec!r}")


class _TranscribingHost:
    """A RuntimeHost that writes each call and its result to the transcript."""

    def __init__(self, host: RuntimeHost, me: str, purpose: str, depth: int,
                 transcript: Transcript) -> None:
        self._host, self._me, self._purpose = host, me, purpose
        self._depth, self._transcript = depth, transcript

    @property
    def limits(self) -> TurnLimits:
        return self._host.limits

    def declare_step(self) -> int:
        return self._host.declare_step()

    def annotate(self, key: str, value: JsonValue) -> None:
        self._host.annotate(key, value)

    async def invoke_tool(self, call: ToolCall) -> ToolResult:
        return await self._logged(call.tool, call.arguments,
                                  lambda: self._host.invoke_tool(call))

    async def call(self, tool: str, arguments: dict[str, Any]) -> ToolResult:
        return await self._logged(tool, arguments, lambda: self._host.call(tool, arguments))

    async def _logged(self, tool: str, arguments: Mapping[str, Any],
                      invoke: Callable[[], Awaitable[ToolResult]]) -> ToolResult:
        recipient = arguments.get("recipient")
        target = tool
        if tool == "messages.request" and isinstance(recipient, dict):
            target = str(recipient.get("agentId", "?"))
            self._transcript.ask(self._me, target, self._purpose, depth=self._depth)
        result = await invoke()
        self._transcript.tool(self._me, target, self._purpose, result, depth=self._depth)
        return result


class Transcribed:
    """Runs ``runtime`` with a host that transcribes its calls (alice's at depth 1)."""

    def __init__(self, me: str, runtime: RuntimePlugin, transcript: Transcript,
                 depth: int = 0) -> None:
        self.me, self.runtime, self.transcript, self.depth = me, runtime, transcript, depth

    async def run(self, turn: TurnRequest, host: RuntimeHost) -> JsonValue:
        """Run the wrapped runtime's turn."""
        return await self.runtime.run(turn, _TranscribingHost(
            host, self.me, turn.purpose, self.depth, self.transcript))


def model_runtime(me: str, driver: ModelDriver, transcript: Transcript) -> Transcribed:
    """``me``'s model-driven runtime with its instructions, transcribed."""
    return Transcribed(me, StandardRuntime(driver, instructions=INSTRUCTIONS[me]), transcript,
                       depth=1 if me == "alice" else 0)
