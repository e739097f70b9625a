"""The audit record. Payloads and tool arguments never appear in it."""

from __future__ import annotations

from typing import Literal, get_args

from ._base import Action, Identifier, JsonObject, Purpose, Timestamp, Versioned
from .address import Address
from .authorization import ResourceRef

__all__ = ["AUDIT_EVENT_TYPES", "AuditEvent", "AuditEventType", "AuditOutcome"]

AuditEventType = Literal[
    # kernel events (SharedOS)
    "authorization.checked",
    "grant.usage.released",
    "tool.catalog.listed",
    "tool.invoked",
    "message.sent",
    "turn.admitted",
    "turn.denied",
    "turn.ended",
    "escalation.requested",
    # host events (the Redis delivery path)
    "message.accepted",
    "message.replayed",  # a re-run turn's same nested call re-attached (issue 12)
    "message.refused",
    "message.dispatched",
    "turn.started",
    "reply.settled",
    "reply.refused",
    "request.failed",
    "request.timed_out",
    "request.cancelled",
    "request.dead_lettered",
    "request.redriven",
    "budget.set",
]
AUDIT_EVENT_TYPES: frozenset[str] = frozenset(get_args(AuditEventType))
AuditOutcome = Literal["allowed", "denied", "succeeded", "failed", "escalated"]


class AuditEvent(Versioned):
    """One append-only audit record."""

    id: Identifier
    type: AuditEventType
    outcome: AuditOutcome
    at: Timestamp
    trace_id: Identifier
    namespace_id: Identifier
    actor: Address
    authority: Address
    owner: Address
    purpose: Purpose
    resource: ResourceRef | None = None
    action: Action | None = None
    grant_id: Identifier | None = None
    operation_id: Identifier | None = None
    tool: Identifier | None = None
    message_id: Identifier | None = None
    receiver: Address | None = None
    reason: Identifier | None = None
    cause: Identifier | None = None
    fail_closed: bool | None = None
    consumed: bool | None = None
    metadata: JsonObject | None = None
