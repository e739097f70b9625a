"""Building audit records from a trusted access context.

Owns ``audit_event``: the one way kernel code builds an :class:`AuditEvent`, so
every record carries the context's namespace, actor, authority, owner, purpose
and trace; a record made inside a turn also carries the turn's identity
(``metadata.turnId``, :data:`TURN_ID`, fresh per run: SharedOS ADR 0027). Payloads
and tool arguments are not accepted. Imports no I/O library.
"""

from __future__ import annotations

from contextvars import ContextVar
from typing import Any

from pydantic import ValidationError

from ..errors import ContractError
from .contracts import AccessContext, AuditEvent, AuditEventType, AuditOutcome
from .ids import new_id

__all__ = ["TURN_ID", "audit_event"]

TURN_ID: ContextVar[str | None] = ContextVar("sharedos_turn_id", default=None)
"""The running turn's identity (set by the TurnExecutor for one run); None outside a turn."""

_OPTIONAL_FIELDS = frozenset(
    name for name, field in AuditEvent.model_fields.items() if not field.is_required()
) - {"version"}


def audit_event(
    context: AccessContext,
    type: AuditEventType,
    outcome: AuditOutcome,
    *,
    id: str | None = None,
    at: str | None = None,
    **fields: Any,
) -> AuditEvent:
    """Build one validated audit event attributed to ``context``.

    Args:
        context: the trusted context; supplies namespaceId, actor, authority,
            owner, purpose and traceId.
        type: the event type (e.g. ``"authorization.checked"``).
        outcome: ``allowed``, ``denied``, ``succeeded`` or ``failed``.
        id: the event id; a fresh :func:`new_id` when omitted.
        at: an RFC 3339 timestamp; ``context.now`` when omitted.
        **fields: optional AuditEvent fields by Python name (resource, action,
            grant_id, operation_id, tool, message_id, receiver, reason, cause,
            fail_closed, consumed, metadata). ``None`` values are dropped.

    Returns:
        The event, validated like any wire object.

    Raises:
        ContractError: a field is unknown or a value does not satisfy the contract
            (for example a context built with ``model_construct`` and an empty purpose).
    """
    turn_id = TURN_ID.get()
    if turn_id is not None:
        fields["metadata"] = {**(fields.get("metadata") or {}), "turnId": turn_id}
    unknown = set(fields) - _OPTIONAL_FIELDS
    if unknown:
        raise ContractError("AuditEvent", [
            {"loc": (name,), "type": "extra_forbidden", "msg": "not an audit event field"}
            for name in sorted(unknown)
        ])
    try:
        return AuditEvent(
            id=id if id is not None else new_id(),
            type=type,
            outcome=outcome,
            at=at if at is not None else context.now,
            trace_id=context.trace_id,
            namespace_id=context.namespace_id,
            actor=context.actor,
            authority=context.authority,
            owner=context.owner,
            purpose=context.purpose,
            **{name: value for name, value in fields.items() if value is not None},
        )
    except ValidationError as exc:
        errors = exc.errors(include_url=False, include_input=False, include_context=False)
        raise ContractError(
            "AuditEvent", [{"loc": e["loc"], "type": e["type"], "msg": e["msg"]} for e in errors]
        ) from None
