"""Test doubles for the messaging ports: an in-memory transport and router.

Owns :class:`InMemoryTransport`, :class:`InMemoryRouter` and :func:`make_reply`.
They are doubles for tests and examples (configurable to refuse, fail, raise or
forge), not a delivery system: nothing is durable and no turn runs. Imports no
I/O library.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Any, Literal, cast

import anyio
import anyio.lowlevel

from ..errors import StoreUnavailable
from .contracts import (
    AccessContext,
    DeliveryAccepted,
    DeliveryDelivered,
    DeliveryDenied,
    DeliveryFailed,
    JsonValue,
    MessageDeliveryResult,
    MessageEnvelope,
    ProtocolError,
    format_timestamp,
)
from .ids import new_id

__all__ = ["InMemoryRouter", "InMemoryTransport", "ReplyFactory", "TransportMode", "make_reply"]

TransportMode = Literal["accept", "deliver", "deny", "fail", "raise"]
ReplyFactory = Callable[[AccessContext, MessageEnvelope], object]
"""Builds what the router answers for a request; may return anything (to forge)."""


def make_reply(request: MessageEnvelope, payload: JsonValue, *, id: str | None = None,
               at: datetime | None = None, **changes: Any) -> MessageEnvelope:
    """A reply that answers ``request``: reversed parties, same purpose and trace.

    Args:
        request: the request being answered.
        payload: the reply's payload.
        id: the reply id (fresh by default).
        at: its creation time (now by default).
        **changes: field overrides by Python name, applied without validation,
            to forge a bad reply in a test (e.g. ``reply_to="other"``).
    """
    reply = MessageEnvelope(
        id=id or new_id(), sender=request.receiver, receiver=request.sender,
        purpose=request.purpose, payload=payload, trace_id=request.trace_id,
        created_at=format_timestamp(at), reply_to=request.id)
    return reply.model_copy(update=changes) if changes else reply


class InMemoryTransport:
    """A :class:`~sharedos_redis.kernel.ports.MessageTransport` double.

    Args:
        mode: ``accept``/``deliver`` answer that receipt; ``deny``/``fail`` answer
            a refusal with ``code``; ``raise`` raises ``StoreUnavailable``.
        code: the error code of ``deny``/``fail`` receipts.
        receipt: when given, its return value is the receipt (to forge one).

    Attributes:
        envelopes: every envelope handed to :meth:`deliver`, in order.
        contexts: the context of each of those calls.
    """

    def __init__(self, mode: TransportMode = "accept", *, code: str = "recipient_unknown",
                 receipt: Callable[[MessageEnvelope], object] | None = None) -> None:
        self.mode: TransportMode = mode
        self.code = code
        self.receipt = receipt
        self.envelopes: list[MessageEnvelope] = []
        self.contexts: list[AccessContext] = []

    @property
    def calls(self) -> int:
        """How many times :meth:`deliver` was called."""
        return len(self.envelopes)

    async def deliver(self, context: AccessContext,
                      envelope: MessageEnvelope, /) -> MessageDeliveryResult:
        """Record ``envelope`` and answer according to :attr:`mode`.

        Raises:
            StoreUnavailable: in mode ``raise``.
        """
        await anyio.lowlevel.checkpoint()
        self.envelopes.append(envelope)
        self.contexts.append(context)
        if self.receipt is not None:
            return cast(MessageDeliveryResult, self.receipt(envelope))
        at = format_timestamp()
        if self.mode == "raise":
            raise StoreUnavailable("deliver", "InMemoryTransport is set to raise")
        if self.mode == "accept":
            return DeliveryAccepted(message_id=envelope.id, timestamp=at)
        if self.mode == "deliver":
            return DeliveryDelivered(message_id=envelope.id, timestamp=at)
        error = ProtocolError(code=self.code, message=f"in-memory transport: {self.mode}")
        if self.mode == "deny":
            return DeliveryDenied(message_id=envelope.id, timestamp=at, error=error)
        return DeliveryFailed(message_id=envelope.id, timestamp=at, error=error)


class InMemoryRouter:
    """A :class:`~sharedos_redis.kernel.ports.MessageRequestRouter` double.

    Args:
        reply: builds the answer (may forge); by default a valid reply with ``payload``.
        payload: the payload of the default reply.
        error: when set, :meth:`resolve_reply` raises it.
        block: when True, :meth:`resolve_reply` waits until cancelled.

    Attributes:
        requests: every request it was asked to resolve.
        waiting: set once a blocked :meth:`resolve_reply` is waiting.
    """

    def __init__(self, reply: ReplyFactory | None = None, *, payload: JsonValue = None,
                 error: Exception | None = None, block: bool = False) -> None:
        self.reply, self.payload, self.error, self.block = reply, payload, error, block
        self.requests: list[MessageEnvelope] = []
        self.waiting = anyio.Event()

    async def resolve_reply(self, context: AccessContext, request: MessageEnvelope,
                            receipt: MessageDeliveryResult, /) -> MessageEnvelope:
        """Answer the configured reply.

        Raises:
            Exception: the configured ``error``.
        """
        await anyio.lowlevel.checkpoint()
        self.requests.append(request)
        if self.block:
            self.waiting.set()
            await anyio.sleep_forever()
        if self.error is not None:
            raise self.error
        if self.reply is not None:
            return cast(MessageEnvelope, self.reply(context, request))
        return make_reply(request, self.payload)
