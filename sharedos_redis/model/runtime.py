"""The standard model runtime: one model-driven turn over a :class:`ModelDriver`.

Owns :class:`StandardRuntime`. It uses only the runtime-facing
:class:`~sharedos_redis.kernel.turn.RuntimeHost` and
:class:`~sharedos_redis.kernel.turn.TurnRequest`, never the kernel.

The loop, one **step** per model call (declared to the host before the call):

1. The model gets the system prompt (the agent's instructions, the turn's purpose
   and its remaining budget; never grants or authority), the conversation and the
   offered tools (wire aliases of exactly the turn's tools, with their schemas).
2. A reply without tool calls is the answer: its text, or, with ``output_model``,
   its JSON validated against that pydantic model (else the turn fails
   ``invalid_runtime_outcome``). A model refusal is answered ``{"refusal": text}``.
3. Each tool call, parallel ones in order, goes through ``host.call`` (fresh
   ToolCall id, the turn's trace, the live instant), so it is counted, authorized
   and audited like any call; its result — refusals included, with their code
   and details — goes back to the model as a tool result. A call whose
   arguments are not a JSON object, or are larger than ``max_argument_chars``,
   is refused here with ``invalid_tool_arguments`` and never reaches the host.
4. **Ending at the limits**: when every call of a reply was refused by a limit
   (``step_limit_exceeded`` or ``tool_call_limit_exceeded``), or the reply came at
   a step past ``max_steps``, the next model call is the *answer step*: the
   model sees those refusals, ``tool_choice`` is ``none``, and its text is the
   turn's output (calls it makes anyway go through the host, which refuses them,
   and are otherwise ignored). So a turn makes at
   most ``max_steps + 2`` model calls and ends ``succeeded`` with the model's own
   answer; no turn-level limit code is added.

Failures: a provider failure the retry policy cannot absorb before the turn's
deadline, or a driver that breaks, ends the turn ``failed`` ``driver_failed``; a
reply cut at the output-token limit, or more than ``max_malformed_calls``
malformed calls, ``invalid_driver_decision``. Cancellation and the deadline
reach the in-flight model call. Tool results are kept in the conversation as
soon as the host returns them, apart from generation (SharedOS ADR 0027), so
a cancelled model call never loses an executed result.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from typing import Any, Final

import anyio
from pydantic import BaseModel, ValidationError

from ..errors import ContractError, ModelCallFailed, TurnFailure
from ..kernel.contracts import JsonObject, JsonValue, ToolResult, parse_json
from ..kernel.turn import RuntimeHost, TurnRequest
from .names import ToolNameCodec
from .protocol import (
    AssistantMessage,
    ModelDriver,
    ModelMessage,
    ModelRequest,
    ModelResponse,
    ModelTool,
    ModelToolCall,
    RetryPolicy,
    ToolResultMessage,
    UserMessage,
)

__all__ = ["DEFAULT_MAX_ARGUMENT_CHARS", "LIMIT_CODES", "StandardRuntime", "default_prompt",
           "render_result"]

DEFAULT_MAX_ARGUMENT_CHARS: Final = 256 * 1024
LIMIT_CODES: Final = frozenset({"step_limit_exceeded", "tool_call_limit_exceeded"})


def default_prompt(turn: TurnRequest) -> str:
    """The turn's input as the model reads it: who asked, for what, and the payload."""
    sender = turn.message.sender.to_wire()
    who = next((str(v) for k, v in sender.items() if k != "kind"), "?")
    payload = turn.message.payload
    body = payload if isinstance(payload, str) else json.dumps(payload, ensure_ascii=False)
    return f"Message from {sender['kind']} {who} (purpose: {turn.purpose}):\n{body}"


class StandardRuntime:
    """A :class:`~sharedos_redis.kernel.turn.RuntimePlugin` whose turns a model drives.

    Args:
        driver: the model seam (``ScriptedDriver``, ``OpenAIChatDriver``,
            ``AnthropicMessagesDriver`` or your own).
        instructions: the agent's instructions (the system prompt's first part).
        output_model: a pydantic model the final answer must satisfy (as JSON);
            without one the answer is the reply's text.
        retry: the retry policy for retryable provider failures.
        max_argument_chars: the largest tool-call argument text accepted.
        max_malformed_calls: malformed calls tolerated per turn before it fails.
        prompt: how the turn's message becomes the first user message.
    """

    def __init__(self, driver: ModelDriver, *, instructions: str = "",
                 output_model: type[BaseModel] | None = None,
                 retry: RetryPolicy | None = None,
                 max_argument_chars: int = DEFAULT_MAX_ARGUMENT_CHARS,
                 max_malformed_calls: int = 8,
                 prompt: Callable[[TurnRequest], str] = default_prompt) -> None:
        self.driver, self.instructions, self.output_model = driver, instructions, output_model
        self.retry = retry or RetryPolicy()
        self.max_argument_chars, self.max_malformed_calls = max_argument_chars, max_malformed_calls
        self.prompt = prompt

    async def run(self, turn: TurnRequest, host: RuntimeHost) -> JsonValue:
        """Run one model-driven turn; see the module docstring for the loop."""
        return await _Turn(self, turn, host).run()


class _Turn:
    """The state of one turn: the conversation, the codec, the counters."""

    def __init__(self, runtime: StandardRuntime, turn: TurnRequest, host: RuntimeHost) -> None:
        self.runtime, self.turn, self.host = runtime, turn, host
        self.codec = ToolNameCodec(tool.name for tool in turn.tools)
        self.tools = tuple(ModelTool(self.codec.to_wire(t.name), t.description,
                                     dict(t.input_schema)) for t in turn.tools)
        self.prompt = runtime.prompt(turn)
        self.messages: list[ModelMessage] = [UserMessage(self.prompt)]
        self.calls = self.malformed = 0
        self.usage: dict[str, Any] = {"modelCalls": 0, "malformedToolCalls": 0}

    async def run(self) -> JsonValue:
        told = f"{self.runtime.instructions}\n\n{self.prompt}".encode()
        self.host.annotate("promptHash", hashlib.sha256(told).hexdigest())
        answer_step = False
        while True:
            step = self.host.declare_step()
            response = await self._generate(step, answer_step)
            self._account(response)
            self.messages.append(AssistantMessage(response.text, response.tool_calls))
            if response.refusal is not None:
                return {"refusal": response.refusal}
            if response.truncated:
                raise TurnFailure("invalid_driver_decision", "reply cut at the token limit")
            if not response.tool_calls:
                return self._answer(response.text)
            limited = await self._run_calls(response.tool_calls)
            if answer_step:
                return self._answer(response.text)
            answer_step = limited or step >= self.host.limits.max_steps

    def _account(self, response: ModelResponse) -> None:
        """Keep the turn's model usage in its record (the served model, calls, tokens)."""
        usage = self.usage
        usage["modelCalls"] += 1
        if response.model:
            usage["model"] = response.model
        for key, count in response.usage.items():
            usage[f"{key}Tokens"] = usage.get(f"{key}Tokens", 0) + count
        self.host.annotate("modelUsage", usage)

    def _system(self, step: int, answer_step: bool) -> str:
        limits = self.host.limits
        parts = [self.runtime.instructions.strip(),
                 f"You act as agent {self.turn.agent.agent_id}. Purpose of this turn: "
                 f"{self.turn.purpose}."]
        if answer_step:
            parts.append("Your tool budget is spent: answer now from what you have.")
        else:
            parts.append(f"Budget: {max(0, limits.max_steps - step)} of {limits.max_steps} "
                         f"steps and {max(0, limits.max_tool_calls - self.calls)} tool calls "
                         "left; a call past either limit is refused.")
        if self.runtime.output_model is not None:
            schema = json.dumps(self.runtime.output_model.model_json_schema())
            parts.append(f"Answer with one JSON value only, matching this schema: {schema}")
        return "\n\n".join(part for part in parts if part)

    async def _generate(self, step: int, answer_step: bool) -> ModelResponse:
        request = ModelRequest(system=self._system(step, answer_step),
                               messages=tuple(self.messages), tools=self.tools,
                               tool_choice="none" if answer_step else "auto", step=step,
                               max_steps=self.host.limits.max_steps)
        policy, attempt = self.runtime.retry, 0
        while True:
            attempt += 1
            try:
                response = await self.runtime.driver.generate(request)
            except ModelCallFailed as exc:
                delay = policy.delay_s(attempt, exc.retry_after_s)
                if not (exc.retryable and attempt < policy.max_attempts and _fits(delay)):
                    raise TurnFailure("driver_failed", exc.kind) from exc
                await anyio.sleep(delay)
                continue
            except Exception as exc:  # a broken driver; cancellation is not an Exception
                raise TurnFailure("driver_failed", type(exc).__name__) from exc
            if not isinstance(response, ModelResponse):
                raise TurnFailure("invalid_driver_decision", "not a ModelResponse")
            return response

    async def _run_calls(self, calls: tuple[ModelToolCall, ...]) -> bool:
        """Run a reply's calls in order; True when every one was refused by a limit."""
        limited = True
        for call in calls:
            content, is_error, code = await self._run_call(call)
            self.messages.append(ToolResultMessage(call.id, call.name, content, is_error))
            limited = limited and code in LIMIT_CODES
        return limited

    async def _run_call(self, call: ModelToolCall) -> tuple[str, bool, str | None]:
        arguments = self._arguments(call.arguments)
        if arguments is None:
            self.malformed += 1
            self.usage["malformedToolCalls"] = self.malformed
            self.host.annotate("modelUsage", self.usage)
            if self.malformed > self.runtime.max_malformed_calls:
                raise TurnFailure("invalid_driver_decision", "too many malformed tool calls")
            return _refusal("invalid_tool_arguments", "the arguments are not a JSON object "
                            f"of at most {self.runtime.max_argument_chars} characters; "
                            "the call was not made"), True, "invalid_tool_arguments"
        self.calls += 1
        try:
            result = await self.host.call(self.codec.from_wire(call.name), arguments)
        except ContractError:  # a tool name no ToolCall can carry
            return _refusal("tool_unavailable", "the tool is not available"), True, \
                "tool_unavailable"
        return _render(result), result.status != "succeeded", _code(result)

    def _arguments(self, text: str) -> dict[str, Any] | None:
        if len(text) > self.runtime.max_argument_chars:
            return None
        try:
            parsed: dict[str, Any] = parse_json(JsonObject, text or "{}")
        except ContractError:
            return None
        return parsed

    def _answer(self, text: str) -> JsonValue:
        model = self.runtime.output_model
        if model is None:
            return text
        try:
            return model.model_validate_json(_strip_fence(text)).model_dump(mode="json")
        except ValidationError as exc:
            raise TurnFailure("invalid_runtime_outcome", "answer breaks the output schema") \
                from exc


def _fits(delay_s: float) -> bool:
    """Whether a retry after ``delay_s`` still starts before the turn's deadline."""
    return anyio.current_time() + delay_s < anyio.current_effective_deadline()


def _code(result: ToolResult) -> str | None:
    return None if result.status == "succeeded" else result.error.code


def render_result(result: ToolResult) -> dict[str, Any]:
    """A tool result as a model reads it: the output, or the typed refusal with its details."""
    if result.status == "succeeded":
        return {"status": "succeeded", "output": result.output}
    error: dict[str, Any] = {"code": result.error.code, "message": result.error.message}
    if result.error.details:
        error["details"] = result.error.details
    return {"status": result.status, "error": error}


def _render(result: ToolResult) -> str:
    return json.dumps(render_result(result), ensure_ascii=False)


def _refusal(code: str, message: str) -> str:
    return json.dumps({"status": "failed", "error": {"code": code, "message": message}})


def _strip_fence(text: str) -> str:
    """The JSON inside a Markdown code fence, if the model wrapped its answer in one."""
    body = text.strip()
    if body.startswith("```") and body.endswith("```"):
        body = body[3:-3]
        body = body.split("\n", 1)[1] if "\n" in body else body
    return body.strip()
