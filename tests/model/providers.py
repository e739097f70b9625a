"""Mocked provider HTTP for the SDK drivers: the SDKs' own httpx client on a mock transport.

The official SDKs send through ``httpx2`` (the httpx fork they depend on), so the
mock is that library's ``MockTransport`` handed to the SDK as ``http_client``:
every byte the driver sends goes through the SDK's real request building, and
every response through its real parsing. :class:`FakeProvider` records each
request body and answers from a script (a list, or a function of the body).
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from typing import Any

import anthropic
import httpx2
import openai

from sharedos_redis.model.anthropic_messages import AnthropicMessagesDriver
from sharedos_redis.model.openai_chat import OpenAIChatDriver

Answer = httpx2.Response | dict[str, Any]
Script = Callable[[dict[str, Any]], Answer | Awaitable[Answer]]


class FakeProvider:
    """One mocked endpoint: records bodies, answers from ``script``."""

    def __init__(self, script: list[Answer] | Script) -> None:
        self.script = script
        self.bodies: list[dict[str, Any]] = []
        self.paths: list[str] = []

    async def handle(self, request: httpx2.Request) -> httpx2.Response:
        body = json.loads(request.content)
        self.bodies.append(body)
        self.paths.append(request.url.path)
        if isinstance(self.script, list):
            answer: Any = self.script.pop(0)
        else:
            answer = self.script(body)
            if not isinstance(answer, (dict, httpx2.Response)):
                answer = await answer
        return answer if isinstance(answer, httpx2.Response) else httpx2.Response(200, json=answer)

    def client(self) -> httpx2.AsyncClient:
        return httpx2.AsyncClient(transport=httpx2.MockTransport(self.handle))


def openai_driver(provider: FakeProvider, model: str = "gpt-test") -> OpenAIChatDriver:
    client = openai.AsyncOpenAI(api_key="sk-test", base_url="http://model.test/v1",
                                http_client=provider.client())
    return OpenAIChatDriver(model, client=client)


def anthropic_driver(provider: FakeProvider, model: str = "claude-test") -> AnthropicMessagesDriver:
    client = anthropic.AsyncAnthropic(api_key="sk-ant-test", base_url="http://model.test",
                                      http_client=provider.client())
    return AnthropicMessagesDriver(model, client=client, max_tokens=512)


def chat_completion(text: str | None = None, *calls: tuple[str, str, str],
                    refusal: str | None = None, finish: str | None = None) -> dict[str, Any]:
    """A Chat Completions response; ``calls`` are ``(id, name, arguments)``."""
    message: dict[str, Any] = {"role": "assistant", "content": text, "refusal": refusal}
    if calls:
        message["tool_calls"] = [{"id": i, "type": "function",
                                  "function": {"name": n, "arguments": a}} for i, n, a in calls]
    return {"id": "chatcmpl-1", "object": "chat.completion", "created": 1, "model": "gpt-test",
            "choices": [{"index": 0, "message": message, "logprobs": None,
                         "finish_reason": finish or ("tool_calls" if calls else "stop")}],
            "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}}


def anthropic_message(text: str | None = None, *calls: tuple[str, str, dict[str, Any]],
                      stop: str | None = None) -> dict[str, Any]:
    """A Messages API response; ``calls`` are ``(id, name, input)``."""
    content: list[dict[str, Any]] = [{"type": "text", "text": text}] if text else []
    content += [{"type": "tool_use", "id": i, "name": n, "input": a} for i, n, a in calls]
    return {"id": "msg_1", "type": "message", "role": "assistant", "model": "claude-test",
            "content": content, "stop_reason": stop or ("tool_use" if calls else "end_turn"),
            "stop_sequence": None, "usage": {"input_tokens": 10, "output_tokens": 5}}


def error(status: int, *, retry_after: str | None = None) -> httpx2.Response:
    headers = {"retry-after": retry_after} if retry_after is not None else {}
    return httpx2.Response(status, json={"error": {"type": "error", "message": "nope"}},
                           headers=headers)
