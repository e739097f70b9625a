"""The Anthropic Messages driver, on the official ``anthropic`` SDK.

Owns :class:`AnthropicMessagesDriver` (install the ``anthropic`` extra).
Request body (``POST /v1/messages``): ``model``, ``max_tokens``, ``system``,
``messages`` (assistant turns as ``text`` and ``tool_use`` blocks; the results
of one reply's calls together in the next ``user`` turn as ``tool_result``
blocks with ``tool_use_id`` and ``is_error``), ``tools`` as ``{name,
description, input_schema}`` and ``tool_choice`` ``{"type": "auto" | "none"}``.
A ``refusal`` stop reason is the model declining; ``max_tokens`` a cut reply.
The SDK's own retries are off: the standard runtime retries within the turn's
deadline.
"""

from __future__ import annotations

import json
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
    from anthropic import AsyncAnthropic

__all__ = ["AnthropicMessagesDriver", "encode_messages_request"]


def _input(arguments: str) -> dict[str, Any]:
    """A replayed call's ``input`` (always an object on this wire)."""
    try:
        value = json.loads(arguments)
    except (ValueError, RecursionError):
        return {}
    return value if isinstance(value, dict) else {}


def _assistant(message: AssistantMessage) -> dict[str, Any]:
    blocks: list[dict[str, Any]] = [{"type": "text", "text": message.text}] if message.text else []
    blocks += [{"type": "tool_use", "id": call.id, "name": call.name,
                "input": _input(call.arguments)} for call in message.tool_calls]
    return {"role": "assistant", "content": blocks}


def _messages(messages: tuple[ModelMessage, ...]) -> list[dict[str, Any]]:
    wire: list[dict[str, Any]] = []
    for message in messages:
        if isinstance(message, ToolResultMessage):
            block = {"type": "tool_result", "tool_use_id": message.call_id,
                     "content": message.content, "is_error": message.is_error}
            last = wire[-1] if wire else None
            if last is not None and last["role"] == "user" and isinstance(last["content"], list):
                last["content"].append(block)  # one user turn answers all of a reply's calls
            else:
                wire.append({"role": "user", "content": [block]})
        elif isinstance(message, AssistantMessage):
            wire.append(_assistant(message))
        else:
            wire.append({"role": "user", "content": message.text})
    return wire


def encode_messages_request(model: str, request: ModelRequest, max_tokens: int,
                            **options: Any) -> dict[str, Any]:
    """The Messages API body for ``request`` (``options`` are added as they are)."""
    body: dict[str, Any] = {"model": model, "max_tokens": max_tokens, "system": request.system,
                            "messages": _messages(request.messages)}
    if request.tools:
        body["tools"] = [{"name": tool.name, "description": tool.description,
                          "input_schema": tool.parameters} for tool in request.tools]
        body["tool_choice"] = {"type": request.tool_choice}
    return {**body, **options}


def _decode(message: Any) -> ModelResponse:
    texts: list[str] = []
    calls: list[ModelToolCall] = []
    for block in message.content:
        if block.type == "text":
            texts.append(str(block.text))
        elif block.type == "tool_use":
            calls.append(ModelToolCall(id=str(block.id), name=str(block.name),
                                       arguments=json.dumps(block.input)))
    text = "".join(texts)
    refused = message.stop_reason == "refusal"
    usage = message.usage
    return ModelResponse(
        text="" if refused else text, tool_calls=() if refused else tuple(calls),
        refusal=(text or "refused") if refused else None,
        truncated=message.stop_reason == "max_tokens", model=message.model,
        usage={} if usage is None else {"input": int(usage.input_tokens),
                                        "output": int(usage.output_tokens)})


class AnthropicMessagesDriver:
    """A :class:`~sharedos_redis.model.protocol.ModelDriver` for the Messages API.

    Args:
        model: the model name (``claude-sonnet-4-5``, ...).
        client: an ``anthropic.AsyncAnthropic`` to use (its retries are turned
            off); default: one built from ``api_key`` (or ``ANTHROPIC_API_KEY``).
        api_key: the key.
        base_url: another endpoint speaking the same API.
        max_tokens: the reply's output-token ceiling (required by the API).
        timeout_s: the SDK's per-request timeout (the turn deadline still applies).
        options: extra body fields, e.g. ``temperature=0``.
    """

    def __init__(self, model: str, *, client: AsyncAnthropic | None = None,
                 api_key: str | None = None, base_url: str | None = None,
                 max_tokens: int = 4096, timeout_s: float = 60.0, **options: Any) -> None:
        import anthropic

        self._sdk, self.model, self.max_tokens, self.options = anthropic, model, max_tokens, options
        self._client = (client.with_options(max_retries=0) if client is not None else
                        anthropic.AsyncAnthropic(api_key=api_key, base_url=base_url,
                                                 max_retries=0, timeout=timeout_s))

    async def generate(self, request: ModelRequest) -> ModelResponse:
        """Make one Messages API call.

        Raises:
            ModelCallFailed: the provider failed or answered something unreadable.
        """
        body = encode_messages_request(self.model, request, self.max_tokens, **self.options)
        with map_sdk_errors(self._sdk):
            message = await self._client.messages.create(**body)
        try:
            return _decode(message)
        except (AttributeError, TypeError, ValueError) as exc:
            raise bad_response() from exc

    async def aclose(self) -> None:
        """Close the SDK client's connections."""
        await self._client.close()
