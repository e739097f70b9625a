"""Tool contracts: definitions, calls and results."""

from __future__ import annotations

from typing import Annotated, Literal, Self

from pydantic import Field, model_validator
from pydantic_core import PydanticCustomError

from ._base import Contract, Identifier, JsonObject, JsonValue, Timestamp
from .authorization import CapabilityRequirement
from .messages import ProtocolError

__all__ = [
    "ToolAnnotations",
    "ToolCall",
    "ToolDefinition",
    "ToolDenied",
    "ToolFailed",
    "ToolResult",
    "ToolSucceeded",
]


class ToolAnnotations(Contract):
    """Catalog hints; never authority."""

    read_only: bool | None = None
    destructive: bool | None = None
    idempotent: bool | None = None


class ToolDefinition(Contract):
    """A JSON-Schema-described tool bound to one permission requirement."""

    name: Identifier
    description: Annotated[str, Field(min_length=1, max_length=8192)]
    namespace: Identifier
    source: Identifier
    read_write: Literal["read", "write"]
    input_schema: JsonObject
    output_schema: JsonObject | None = None
    required_capability: CapabilityRequirement
    annotations: ToolAnnotations | None = None
    metadata: JsonObject | None = None

    @model_validator(mode="after")
    def _classification(self) -> Self:
        notes = self.annotations
        if notes is not None and self.read_write == "read" and notes.destructive:
            raise PydanticCustomError("tool", "a read-classified tool cannot be destructive")
        if notes is not None and self.read_write == "write" and notes.read_only:
            raise PydanticCustomError("tool", "a write-classified tool cannot be read-only")
        return self


class ToolCall(Contract):
    """One invocation a runtime asks for."""

    id: Identifier
    tool: Identifier
    arguments: JsonObject
    trace_id: Identifier
    requested_at: Timestamp


class ToolSucceeded(Contract):
    """The tool ran; ``output`` is its JSON result."""

    status: Literal["succeeded"] = "succeeded"
    call_id: Identifier
    tool: Identifier
    completed_at: Timestamp
    output: JsonValue
    metadata: JsonObject | None = None


class ToolDenied(Contract):
    """The call was refused before the tool ran."""

    status: Literal["denied"] = "denied"
    call_id: Identifier
    tool: Identifier
    completed_at: Timestamp
    error: ProtocolError
    metadata: JsonObject | None = None


class ToolFailed(Contract):
    """The call was admitted but did not succeed."""

    status: Literal["failed"] = "failed"
    call_id: Identifier
    tool: Identifier
    completed_at: Timestamp
    error: ProtocolError
    metadata: JsonObject | None = None


ToolResult = Annotated[ToolSucceeded | ToolDenied | ToolFailed, Field(discriminator="status")]
