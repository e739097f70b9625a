"""Execution contracts: one permission-controlled agent turn, its events and its result."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, StringConstraints

from ._base import Contract, Identifier, JsonObject, JsonValue, Lax, Timestamp, Versioned
from .address import Address, AgentAddress
from .authorization import AccessContext
from .messages import MessageEnvelope, ProtocolError
from .tools import ToolDefinition

__all__ = [
    "MAX_EXECUTION_TIMEOUT_MS",
    "MAX_EXECUTION_TOOL_CALLS",
    "ExecutionCancelled",
    "Escalation",
    "ExecutionDenied",
    "ExecutionEscalated",
    "ExecutionEvent",
    "ExecutionFailed",
    "ExecutionOptions",
    "ExecutionRequest",
    "ExecutionResult",
    "ExecutionSucceeded",
]

MAX_EXECUTION_TIMEOUT_MS = 600_000
MAX_EXECUTION_TOOL_CALLS = 10_000


class ExecutionOptions(Contract):
    """Turn limits; defaults are applied by the turn executor."""

    max_steps: Annotated[int, Field(gt=0, le=1000)] | None = None
    max_tool_calls: Annotated[int, Field(gt=0, le=MAX_EXECUTION_TOOL_CALLS)] | None = None
    timeout_ms: Annotated[int, Field(gt=0, le=MAX_EXECUTION_TIMEOUT_MS)] | None = None


class ExecutionRequest(Versioned):
    """One permission-controlled turn of ``agent`` for ``message``."""

    execution_id: Identifier
    agent: AgentAddress
    context: AccessContext
    message: MessageEnvelope
    tools: Annotated[tuple[ToolDefinition, ...], Lax, Field(max_length=512)]
    state: JsonObject | None = None
    options: ExecutionOptions | None = None
    metadata: JsonObject | None = None


class ExecutionEvent(Versioned):
    """An append-only event emitted while executing a turn."""

    event_id: Identifier
    execution_id: Identifier
    trace_id: Identifier
    sequence: Annotated[int, Field(ge=0)]
    type: Annotated[str, StringConstraints(strip_whitespace=True, min_length=1, max_length=128)]
    data: JsonValue
    occurred_at: Timestamp


class _ResultBase(Versioned):
    execution_id: Identifier
    trace_id: Identifier
    events: Annotated[tuple[ExecutionEvent, ...], Lax]
    started_at: Timestamp
    completed_at: Timestamp
    metadata: JsonObject | None = None


class ExecutionSucceeded(_ResultBase):
    """The runtime finished; ``output`` is its answer."""

    status: Literal["succeeded"] = "succeeded"
    output: JsonValue


class ExecutionDenied(_ResultBase):
    """The envelope refused the turn; the runtime never started."""

    status: Literal["denied"] = "denied"
    error: ProtocolError


class ExecutionFailed(_ResultBase):
    """The runtime failed or returned something invalid."""

    status: Literal["failed"] = "failed"
    error: ProtocolError


class ExecutionCancelled(_ResultBase):
    """The turn was cancelled (deadline or host)."""

    status: Literal["cancelled"] = "cancelled"
    error: ProtocolError | None = None


class Escalation(Contract):
    """A runtime's request that a human decide (SharedOS ADR 0011): a record, never authority.

    The reviewer is assumed (the owner the turn runs for); ``status`` is always
    ``pending``: nothing inside the host advances it. Resolving it is issuing a grant,
    which the next turn loads.
    """

    reason: Annotated[str, StringConstraints(strip_whitespace=True, min_length=1,
                                             max_length=4096)]
    reviewer: Address
    requested_at: Timestamp
    status: Literal["pending"] = "pending"


class ExecutionEscalated(_ResultBase):
    """The runtime stopped and asked for a human (``escalation_requested``); no error."""

    status: Literal["escalated"] = "escalated"
    escalation: Escalation


ExecutionResult = Annotated[
    ExecutionSucceeded | ExecutionDenied | ExecutionFailed | ExecutionCancelled
    | ExecutionEscalated,
    Field(discriminator="status"),
]
