"""Message contracts: envelope, model-authored request arguments, delivery receipts, errors."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field

from ._base import (
    Checked,
    Contract,
    Identifier,
    JsonObject,
    JsonValue,
    Lax,
    Purpose,
    Timestamp,
    Versioned,
)
from .address import (
    Address,
    AgentAddress,
    GroupAddress,
    HumanAddress,
    RecipientAddress,
    ServiceAddress,
)

__all__ = [
    "DeliveryAccepted",
    "DeliveryDelivered",
    "DeliveryDenied",
    "DeliveryFailed",
    "MessageDeliveryResult",
    "MessageEnvelope",
    "MessageProvenance",
    "MessageRequestArguments",
    "ProtocolError",
]


class ProtocolError(Contract):
    """A typed error: a closed ``code``, a human ``message``, optional details."""

    code: Identifier
    message: Annotated[str, Field(min_length=1, max_length=4096)]
    retryable: bool | None = None
    details: JsonObject | None = None


class MessageProvenance(Contract):
    """Hop provenance a host may attach; the kernel neither sets nor reads it."""

    source: Identifier
    parent_ids: Annotated[tuple[Identifier, ...], Lax, Field(max_length=64)]
    metadata: JsonObject | None = None


class MessageEnvelope(Versioned, Checked):
    """A message: data and one host-bound purpose, never authority."""

    id: Identifier
    sender: Address
    receiver: Address
    purpose: Purpose
    payload: JsonValue
    trace_id: Identifier
    created_at: Timestamp
    reply_to: Identifier | None = None
    provenance: MessageProvenance | None = None


class MessageRequestArguments(Contract):
    """Exactly what a model may author for ``messages.request``: ``{recipient, payload}``."""

    recipient: RecipientAddress
    payload: JsonValue

    def recipient_address(self) -> Address:
        """The recipient as an ordinary :data:`Address`."""
        r = self.recipient
        if r.kind == "human":
            return HumanAddress(user_id=r.user_id)
        if r.kind == "agent":
            return AgentAddress(agent_id=r.agent_id)
        if r.kind == "group":
            return GroupAddress(conversation_id=r.conversation_id)
        return ServiceAddress(service_id=r.service_id)


class DeliveryAccepted(Checked):
    """The transport durably accepted the message (it will be delivered)."""

    status: Literal["accepted"] = "accepted"
    message_id: Identifier
    timestamp: Timestamp
    metadata: JsonObject | None = None


class DeliveryDelivered(Checked):
    """The transport delivered the message."""

    status: Literal["delivered"] = "delivered"
    message_id: Identifier
    timestamp: Timestamp
    metadata: JsonObject | None = None


class DeliveryDenied(Checked):
    """The route refused the message; never upgraded to accepted."""

    status: Literal["denied"] = "denied"
    message_id: Identifier
    timestamp: Timestamp
    error: ProtocolError
    metadata: JsonObject | None = None


class DeliveryFailed(Checked):
    """Delivery failed."""

    status: Literal["failed"] = "failed"
    message_id: Identifier
    timestamp: Timestamp
    error: ProtocolError
    metadata: JsonObject | None = None


MessageDeliveryResult = Annotated[
    DeliveryAccepted | DeliveryDelivered | DeliveryDenied | DeliveryFailed,
    Field(discriminator="status"),
]
