"""Validation of what the messaging ports answer: delivery receipts and replies.

Owns ``check_receipt`` and ``check_reply``. Nothing a port returns is trusted:
a receipt must name the delivered envelope, a reply must answer the request.
Imports no I/O library.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

from .contracts import (
    DeliveryAccepted,
    DeliveryDelivered,
    DeliveryDenied,
    DeliveryFailed,
    MessageDeliveryResult,
    MessageEnvelope,
    parse_wire,
)
from .tools import protocol_error

__all__ = ["check_receipt", "check_reply"]

_RECEIPTS: Final = (DeliveryAccepted, DeliveryDelivered, DeliveryDenied, DeliveryFailed)


def check_receipt(raw: object, envelope: MessageEnvelope, at: str) -> MessageDeliveryResult:
    """The transport's receipt if it is valid and names ``envelope``; else a failed one.

    A receipt instance that went through validation unchanged is taken as is; any
    other (one made with ``model_construct``, a subclass) is re-validated; a mapping
    is parsed strictly; anything else is invalid.
    """
    receipt: MessageDeliveryResult | None = None
    if isinstance(raw, _RECEIPTS) and type(raw) in _RECEIPTS and raw.is_validated:
        receipt = raw
    else:
        try:
            wire = raw.to_wire() if isinstance(raw, _RECEIPTS) else raw
            if isinstance(wire, Mapping):
                receipt = parse_wire(MessageDeliveryResult, wire)
        except Exception:  # a hand-built receipt may not even serialise; it is just invalid
            receipt = None
    if receipt is None or receipt.message_id != envelope.id:
        return DeliveryFailed(message_id=envelope.id, timestamp=at,
                              error=protocol_error("invalid_message_receipt"))
    return receipt


def check_reply(request: MessageEnvelope, raw: object) -> tuple[MessageEnvelope | None, str]:
    """Strict reply validation (SPEC §3 step 8).

    Returns:
        ``(reply, "ok")`` when ``raw`` is a valid MessageEnvelope with replyTo ==
        request.id, reversed parties, the same purpose and the same trace; else
        ``(None, problem)`` where ``problem`` is an audit-only cause.
    """
    if not isinstance(raw, MessageEnvelope):
        return None, "reply_not_an_envelope"
    if type(raw) is MessageEnvelope and raw.is_validated:
        reply = raw
    else:
        try:  # re-validate: a hand-built instance (model_construct) skipped validation
            reply = MessageEnvelope.from_wire(raw.to_wire())
        except Exception:
            return None, "reply_malformed"
    checks = (
        (reply.reply_to == request.id, "reply_to_mismatch"),
        (reply.sender == request.receiver, "reply_sender_mismatch"),
        (reply.receiver == request.sender, "reply_receiver_mismatch"),
        (reply.purpose == request.purpose, "reply_purpose_mismatch"),
        (reply.trace_id == request.trace_id, "reply_trace_mismatch"),
    )
    for ok, problem in checks:
        if not ok:
            return None, problem
    return reply, "ok"
