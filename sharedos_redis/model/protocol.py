"""The model driver protocol: what the standard runtime asks a model and what it gets back.

Owns :class:`ModelDriver` (one method, ``generate``), the request/response
values it exchanges with the runtime, :class:`RetryPolicy` and
:func:`classify_status`. A driver translates one :class:`ModelRequest` into its
provider's wire format, makes one call and translates the reply; it keeps no
turn state, decides nothing about tools and never sees grants. Tool names here
are the provider-safe *wire* names (:mod:`~sharedos_redis.model.names`).
Imports no SDK and no I/O library.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

__all__ = [
    "AssistantMessage",
    "ModelDriver",
    "ModelMessage",
    "ModelRequest",
    "ModelResponse",
    "ModelTool",
    "ModelToolCall",
    "RetryPolicy",
    "ToolResultMessage",
    "UserMessage",
    "classify_status",
]


@dataclass(frozen=True)
class ModelTool:
    """One offered tool as the model sees it: wire name, description, JSON Schema."""

    name: str
    description: str
    parameters: dict[str, Any]


@dataclass(frozen=True)
class ModelToolCall:
    """One tool call the model asked for.

    Attributes:
        id: the provider's call id (pairs the result with the call; not unique
            across turns or even responses, so never used as a ToolCall id).
        name: the wire name the model used.
        arguments: the arguments exactly as the model wrote them (JSON text).
    """

    id: str
    name: str
    arguments: str


@dataclass(frozen=True)
class UserMessage:
    """The turn's input (the message the agent answers)."""

    text: str


@dataclass(frozen=True)
class AssistantMessage:
    """A model reply kept in the conversation (its text and the calls it asked for)."""

    text: str
    tool_calls: tuple[ModelToolCall, ...] = ()


@dataclass(frozen=True)
class ToolResultMessage:
    """The result of one call, as JSON text; ``is_error`` when it was refused or failed."""

    call_id: str
    name: str
    content: str
    is_error: bool = False


ModelMessage = UserMessage | AssistantMessage | ToolResultMessage


@dataclass(frozen=True)
class ModelRequest:
    """One model call: the whole conversation so far plus the offered tools.

    Attributes:
        system: instructions, the turn's purpose and its remaining budget.
        messages: the conversation (user input, replies, tool results).
        tools: the offered tools (wire names).
        tool_choice: ``auto``, or ``none`` on the answer step (tools stay
            declared because the conversation refers to them).
        step: this call's step index (0-based), as declared to the host.
        max_steps: the turn's step budget.
    """

    system: str
    messages: tuple[ModelMessage, ...]
    tools: tuple[ModelTool, ...]
    tool_choice: Literal["auto", "none"] = "auto"
    step: int = 0
    max_steps: int = 1


@dataclass(frozen=True)
class ModelResponse:
    """What one model call produced.

    Attributes:
        text: the reply's text (may be empty when it only calls tools).
        tool_calls: the calls it asked for, in order (parallel calls included).
        refusal: the model's refusal text, when it declined to answer.
        truncated: the provider cut the reply at its output-token limit.
        model: the model that served the call, when the provider says.
        usage: token counts the provider reported (``input``, ``output``).
    """

    text: str = ""
    tool_calls: tuple[ModelToolCall, ...] = ()
    refusal: str | None = None
    truncated: bool = False
    model: str | None = None
    usage: dict[str, int] = field(default_factory=dict)


class ModelDriver(Protocol):
    """A model/provider seam: one request in, one response out.

    Raises :class:`~sharedos_redis.errors.ModelCallFailed` for a provider
    failure (the runtime retries it when ``retryable`` and the turn's deadline
    allows); must let cancellation propagate into the in-flight call.
    """

    async def generate(self, request: ModelRequest) -> ModelResponse:
        """Make one model call."""
        ...


@dataclass(frozen=True)
class RetryPolicy:
    """How often and how long the runtime retries a retryable provider failure.

    The delay before attempt *n + 1* is ``Retry-After`` when the provider sent
    one, else ``base_delay_s * 2 ** (n - 1)``, capped at ``max_delay_s``; a
    retry whose delay would end past the turn's deadline is not made (the turn
    fails ``driver_failed`` at once instead of being cancelled later).
    """

    max_attempts: int = 3
    base_delay_s: float = 0.5
    max_delay_s: float = 8.0

    def delay_s(self, attempt: int, retry_after_s: float | None) -> float:
        """The wait before the attempt after ``attempt`` (1-based)."""
        wanted = retry_after_s if retry_after_s is not None else (
            self.base_delay_s * 2 ** (attempt - 1))
        return max(0.0, min(self.max_delay_s, wanted))


def classify_status(status: int) -> tuple[str, bool]:
    """Map a provider's HTTP status to ``(kind, retryable)`` for ModelCallFailed."""
    if status == 429:
        return "rate_limited", True
    if status in (408, 504):
        return "timeout", True
    if status in (401, 403):
        return "auth", False
    if status == 409 or status >= 500:  # 529 is Anthropic's "overloaded"
        return "unavailable", True
    return "bad_request", False
