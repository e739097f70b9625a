"""The ``sharedos.escalate`` affordance: a runtime ends its turn asking a human to decide.

Owns :data:`ESCALATE`, :data:`ESCALATE_TOOL` and :func:`escalation_reason`. The
affordance is catalogued like any tool (SharedOS ADR 0017/0019): a turn can
escalate only when its catalogue holds ``sharedos.escalate`` (the ``sharedos``
tool namespace enabled and the tool named by the request). Calling it grants
nothing: it records one ``escalation.requested`` audit event and the turn then
ends ``escalated`` with ``escalation_requested`` (ADR 0011), which its requester
receives as the typed outcome ``recipient_turn_escalated``. Imports no I/O library.
"""

from __future__ import annotations

from typing import Final

from ..errors import ContractError
from .contracts import ToolCall, ToolDefinition

__all__ = ["ESCALATE", "ESCALATE_TOOL", "ESCALATE_TOOL_NAMESPACE", "escalation_reason"]

ESCALATE: Final = "sharedos.escalate"
ESCALATE_TOOL_NAMESPACE: Final = "sharedos"

ESCALATE_TOOL: Final = ToolDefinition.from_wire({
    "name": ESCALATE,
    "description": "Stop this turn and ask a human to decide; say why in `reason`.",
    "namespace": ESCALATE_TOOL_NAMESPACE,
    "source": "sharedos",
    "readWrite": "read",
    "inputSchema": {"type": "object", "additionalProperties": False, "required": ["reason"],
                    "properties": {"reason": {"type": "string", "minLength": 1,
                                              "maxLength": 4096}}},
    "requiredCapability": {"resource": {"namespace": "sharedos.escalation", "path": []},
                           "action": "escalate"},
    "annotations": {"readOnly": True, "destructive": False},
})
"""Offered in the ``sharedos`` tool namespace; its requirement is descriptive only (an
escalation needs no grant because it grants and changes nothing)."""


def escalation_reason(call: ToolCall) -> str:
    """The reason of a ``sharedos.escalate`` call: exactly ``{"reason": <1-4096 chars>}``.

    Raises:
        ContractError: the arguments are anything else.
    """
    arguments = call.arguments
    reason = arguments.get("reason")
    if set(arguments) != {"reason"} or not isinstance(reason, str) \
            or not 1 <= len(reason.strip()) <= 4096:
        raise ContractError("sharedos.escalate", [{
            "loc": ("arguments",), "type": "escalation", "msg": "exactly a reason"}])
    return reason.strip()
