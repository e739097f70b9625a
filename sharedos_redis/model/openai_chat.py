"""The OpenAI-compatible Chat Completions driver, on the official ``openai`` SDK.

Owns :class:`OpenAIChatDriver` (install the ``openai`` extra). Works with any
server speaking ``POST /chat/completions`` with function tools: OpenAI, vLLM,
Ollama, LM Studio (pass ``base_url``). Request body: ``model``, ``messages``
(``system``, ``user``, ``assistant`` with ``tool_calls``, one ``tool`` message
per call with its ``tool_call_id``), ``tools`` as ``{"type": "function",
"function": {name, description, parameters}}`` and ``tool_choice``. The SDK's
own retries are off: the standard runtime retries within the turn's deadline.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ._sdk import bad_response, map_sdk_errors
from .protocol import (
    AssistantMessage,
    ModelMessage,
    ModelRequest,
    ModelResponse,
    ModelToolCall,
    ToolResultMessage,
)

if TYPE_CHECKING:
    from openai import AsyncOpenAI

__all__ = ["OpenAIChatDriver", "encode_chat_request"]


def _message(message: ModelMessage) -> dict[str, Any]:
    if isinstance(message, ToolResultMessage):
        return {"role": "tool", "tool_call_id": message.call_id, "content": message.content}
    if isinstance(message, AssistantMessage):
        wire: dict[str, Any] = {"role": "assistant", "content": message.text or None}
        if message.tool_calls:
            wire["tool_calls"] = [
                {"id": call.id, "type": "function",
                 "function": {"name": call.name, "arguments": call.arguments}}
                for call in message.tool_calls]
        return wire
    return {"role": "user", "content": message.text}


def encode_chat_request(model: str, request: ModelRequest, **options: Any) -> dict[str, Any]:
    """The Chat Completions body for ``request`` (``options`` are added as they are)."""
    body: dict[str, Any] = {
        "model": model,
        "messages": [{"role": "system", "content": request.system},
                     *(_message(m) for m in request.messages)],
    }
    if request.tools:
        body["tools"] = [{"type": "function", "function": {
            "name": tool.name, "description": tool.description, "parameters": tool.parameters}}
            for tool in request.tools]
        body["tool_choice"] = request.tool_choice
    return {**body, **options}


def _decode(completion: Any) -> ModelResponse:
    choice = completion.choices[0]
    message = choice.message
    calls = tuple(
        ModelToolCall(id=str(call.id), name=str(call.function.name),
                      arguments=str(call.function.arguments))
        for call in (message.tool_calls or ()) if getattr(call, "type", "function") == "function")
    usage = completion.usage
    return ModelResponse(
        text=message.content or "", tool_calls=calls, refusal=message.refusal or None,
        truncated=choice.finish_reason == "length", model=completion.model,
        usage={} if usage is None else {"input": int(usage.prompt_tokens),
                                        "output": int(usage.completion_tokens)})


class OpenAIChatDriver:
    """A :class:`~sharedos_redis.model.protocol.ModelDriver` for Chat Completions.

    Args:
        model: the model name (``gpt-4.1-mini``, ``qwen2.5:7b`` on Ollama, ...).
        client: an ``openai.AsyncOpenAI`` to use (its retries are turned off);
            default: one built from ``base_url``/``api_key`` (or the SDK's
            ``OPENAI_BASE_URL``/``OPENAI_API_KEY``) on first use.
        base_url: e.g. ``http://127.0.0.1:11434/v1`` for Ollama.
        api_key: the key (local servers accept any).
        timeout_s: the SDK's per-request timeout (the turn deadline still applies).
        options: extra body fields, e.g. ``temperature=0`` or ``max_completion_tokens``.
    """

    def __init__(self, model: str, *, client: AsyncOpenAI | None = None,
                 base_url: str | None = None, api_key: str | None = None,
                 timeout_s: float = 60.0, **options: Any) -> None:
        import openai

        self._sdk, self.model, self.options = openai, model, options
        self._client = (client.with_options(max_retries=0) if client is not None else
                        openai.AsyncOpenAI(base_url=base_url, api_key=api_key,
                                           max_retries=0, timeout=timeout_s))

    async def generate(self, request: ModelRequest) -> ModelResponse:
        """Make one Chat Completions call.

        Raises:
            ModelCallFailed: the provider failed or answered something unreadable.
        """
        body = encode_chat_request(self.model, request, **self.options)
        with map_sdk_errors(self._sdk):
            completion = await self._client.chat.completions.create(**body)
        try:
            return _decode(completion)
        except (AttributeError, IndexError, TypeError, ValueError) as exc:
            raise bad_response() from exc

    async def aclose(self) -> None:
        """Close the SDK client's connections."""
        await self._client.close()
