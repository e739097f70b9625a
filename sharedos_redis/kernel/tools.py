"""Tool handlers, the tool registry and the builders of tool results.

Owns: :data:`ToolHandler`, :class:`ToolRegistry`, ``tool_succeeded`` /
``tool_denied`` / ``tool_failed``, ``protocol_error`` and ``record_outcome``
(the after-effect audit write). Imports no I/O library.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any

from ..errors import ConfigurationError, ContractError
from .contracts import (
    AccessContext,
    Address,
    AuditEvent,
    JsonValue,
    ProtocolError,
    ToolCall,
    ToolDefinition,
    ToolDenied,
    ToolFailed,
    ToolResult,
    ToolSucceeded,
    parse_wire,
)
from .ports import AuditSink
from .requirements import RequirementResolver

__all__ = [
    "ERROR_MESSAGES",
    "RegisteredTool",
    "ToolHandler",
    "ToolOutcome",
    "ToolRegistry",
    "checked_tool_result",
    "protocol_error",
    "queued_later",
    "record_outcome",
    "tool_denied",
    "tool_failed",
    "tool_succeeded",
]

_log = logging.getLogger(__name__)

ToolHandler = Callable[[AccessContext, ToolCall], Awaitable[Any]]
"""A host tool: receives the trusted context and the call, returns JSON output.

It may instead return its own ``ToolSucceeded``/``ToolFailed`` for this call. A
result for another call or tool, a ``ToolDenied`` (only the kernel denies) or a
non-JSON output is ``failed`` with ``invalid_tool_result``. Raising makes the call
``failed`` with ``tool_failed``; the exception text never reaches the caller.
"""

ERROR_MESSAGES: dict[str, str] = {
    "trace_mismatch": "the tool call's traceId does not match the turn",
    "tool_unavailable": "the tool is not available",
    "invalid_tool_arguments": "the tool arguments do not satisfy the tool's schema",
    "invalid_tool_requirement": "the tool resolved a requirement outside its declared ceiling",
    "tool_requirement_resolution_failed": "the tool could not resolve its requirement",
    "invalid_tool_result": "the tool returned a malformed or mismatched result",
    "stale_request": "the tool call was not minted inside this turn",
    "no_matching_grant": "no grant allows this operation",
    "grant_exhausted": "the grant that allows this operation has no uses left",
    "invalid_request": "the operation's requirement is not valid in this context",
    "tool_failed": "the tool failed",
    "message_context_mismatch": "the message does not match the acting context",
    "message_transport_not_configured": "no message transport is configured",
    "message_delivery_failed": "the message could not be delivered",
    "invalid_message_receipt": "the transport returned an invalid receipt",
    "message_request_not_accepted": "the message request was not accepted",
    "message_reply_resolution_failed": "no reply could be obtained for the message request",
    "invalid_message_reply": "the reply does not answer the message request",
    "tool_call_limit_exceeded": "the turn's tool call limit was reached",
    "step_limit_exceeded": "the turn's step limit was reached",
    "actor_mismatch": "the acting context is not the executing agent",
    "receiver_mismatch": "the message is not addressed to the executing agent",
    "runtime_failed": "the runtime failed",
    "invalid_runtime_outcome": "the runtime returned a value that is not JSON",
    "driver_failed": "the model driver failed",
    "invalid_driver_decision": "the model driver returned an output that cannot be used",
    "turn_cancelled": "the turn was cancelled",
    "audit_unavailable": "the audit record could not be written",
    "turn_lease_lost": "this turn no longer holds its lease: another attempt runs it",
}


def protocol_error(code: str, details: Mapping[str, Any] | None = None) -> ProtocolError:
    """A :class:`ProtocolError` with ``code`` and a fixed, input-free message."""
    message = ERROR_MESSAGES.get(code, f"refused: {code}")
    return ProtocolError(code=code, message=message,
                         details=dict(details) if details is not None else None)


def tool_succeeded(call: ToolCall, at: str, output: JsonValue,
                   metadata: Mapping[str, Any] | None = None) -> ToolSucceeded:
    """A ``succeeded`` result for ``call``."""
    return ToolSucceeded(call_id=call.id, tool=call.tool, completed_at=at, output=output,
                         metadata=dict(metadata) if metadata is not None else None)


def tool_denied(call: ToolCall, at: str, code: str,
                details: Mapping[str, Any] | None = None) -> ToolDenied:
    """A ``denied`` result for ``call`` (refused before the tool ran)."""
    return ToolDenied(call_id=call.id, tool=call.tool, completed_at=at,
                      error=protocol_error(code, details))


def tool_failed(call: ToolCall, at: str, code: str,
                details: Mapping[str, Any] | None = None) -> ToolFailed:
    """A ``failed`` result for ``call`` (admitted, but it did not succeed)."""
    return ToolFailed(call_id=call.id, tool=call.tool, completed_at=at,
                      error=protocol_error(code, details))


def queued_later(audit: AuditSink, event: AuditEvent) -> bool:
    """Queue ``event`` with a :class:`~.ports.DeferringAuditSink`'s background writer;
    False when ``audit`` cannot defer or its writer is not running (write it now).

    The protocol's ``record_later`` member is looked up directly: an ``isinstance``
    against the runtime-checkable protocol walks its members on every call.
    """
    record_later = getattr(audit, "record_later", None)
    return record_later is not None and bool(record_later(event))


async def record_outcome(audit: AuditSink, event: AuditEvent) -> bool:
    """Write an after-effect (or refusal) audit record; never raises on sink failure.

    The effect it describes has already happened (or was refused), so turning
    the result into a failure would mislead the caller into retrying; the
    before-effect record is the authorizer's, and that one fails closed.

    Returns:
        True when the record was written.
    """
    try:
        if queued_later(audit, event):
            return True  # written in order by the sink's background writer
        await audit.record(event)
    except Exception as exc:  # the sink may raise anything; cancellation still propagates
        _log.warning("audit record %s (%s) not written: %s", event.id, event.type,
                     type(exc).__name__)
        return False
    return True


class ToolRegistry:
    """Registered tools by name; one definition and one handler per name."""

    def __init__(self, reserved: frozenset[str] = frozenset()) -> None:
        self._reserved = reserved
        self._tools: dict[str, RegisteredTool] = {}

    def register(self, definition: ToolDefinition, handler: ToolHandler,
                 resolve: RequirementResolver | None = None) -> None:
        """Add a tool (with ``resolve``, its definition's requirement is a ceiling).

        Raises:
            ConfigurationError: the name is reserved or already registered.
        """
        if definition.name in self._reserved:
            raise ConfigurationError(f"tool name {definition.name!r} is reserved")
        if definition.name in self._tools:
            raise ConfigurationError(f"tool {definition.name!r} is already registered")
        self._tools[definition.name] = RegisteredTool(definition, handler, resolve)

    def get(self, name: str) -> RegisteredTool | None:
        """The tool registered under ``name``, if any."""
        return self._tools.get(name)

    def entries(self) -> list[RegisteredTool]:
        """Every registered tool, in registration order."""
        return list(self._tools.values())

    def definitions(self) -> list[ToolDefinition]:
        """Every registered definition, in registration order."""
        return [entry.definition for entry in self._tools.values()]

    def __contains__(self, name: object) -> bool:
        return name in self._tools

    def __len__(self) -> int:
        return len(self._tools)


@dataclass(frozen=True)
class RegisteredTool:
    """One registered host tool.

    Attributes:
        definition: what the catalogue shows; its ``requiredCapability`` is the
            fixed requirement, or the ceiling when ``resolve`` is set.
        handler: runs the call after the kernel authorized it.
        resolve: derives each call's exact requirement from its arguments.
    """

    definition: ToolDefinition
    handler: ToolHandler
    resolve: RequirementResolver | None = None


def checked_tool_result(call: ToolCall, at: str, output: object) -> ToolResult | None:
    """What a handler returned, as this call's result; None when it is invalid.

    JSON output becomes ``succeeded``; a ``ToolSucceeded``/``ToolFailed`` for this
    very call and tool is kept (re-validated). Anything else (non-JSON, another
    call's result, a ``ToolDenied``) is None: ``invalid_tool_result``.
    """
    if isinstance(output, ToolSucceeded | ToolFailed):
        if output.call_id != call.id or output.tool != call.tool:
            return None
        try:
            return type(output).from_wire(output.to_wire())
        except Exception:  # a model_construct'd result may fail anywhere
            return None
    if isinstance(output, ToolDenied):
        return None
    try:
        return tool_succeeded(call, at, parse_wire(JsonValue, output))
    except ContractError:
        return None


@dataclass(frozen=True)
class ToolOutcome:
    """A tool result plus what its ``tool.invoked`` audit record should say.

    ``cause`` names the real situation behind a coarse code (audit only, never
    returned to the caller).
    """

    result: ToolResult
    cause: str | None = None
    message_id: str | None = None
    receiver: Address | None = None
