"""Model turns: the standard runtime and its model drivers.

:class:`StandardRuntime` runs a model-driven turn inside the kernel's envelope
over any :class:`ModelDriver`: :class:`ScriptedDriver` (tests, no network),
``OpenAIChatDriver`` (``openai`` extra) and ``AnthropicMessagesDriver``
(``anthropic`` extra); ``PydanticAIRuntime`` runs a ``pydantic_ai.Agent`` as the
loop instead (``pydantic-ai`` extra). Those three are loaded lazily, so
importing this package imports no SDK.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

from .names import ToolNameCodec, wire_name
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
from .runtime import StandardRuntime, default_prompt
from .scripted import ScriptedDriver, reply, tool_call

if TYPE_CHECKING:
    from .anthropic_messages import AnthropicMessagesDriver
    from .openai_chat import OpenAIChatDriver
    from .pydantic_ai_agent import PydanticAIRuntime

__all__ = [
    "AnthropicMessagesDriver",
    "AssistantMessage",
    "ModelDriver",
    "ModelMessage",
    "ModelRequest",
    "ModelResponse",
    "ModelTool",
    "ModelToolCall",
    "OpenAIChatDriver",
    "PydanticAIRuntime",
    "RetryPolicy",
    "ScriptedDriver",
    "StandardRuntime",
    "ToolNameCodec",
    "ToolResultMessage",
    "UserMessage",
    "default_prompt",
    "reply",
    "tool_call",
    "wire_name",
]

_LAZY = {"OpenAIChatDriver": ".openai_chat", "AnthropicMessagesDriver": ".anthropic_messages",
         "PydanticAIRuntime": ".pydantic_ai_agent"}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(import_module(module, __name__), name)
