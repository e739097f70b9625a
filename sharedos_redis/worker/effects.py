"""Which effects a running turn has caused through the host: the drain's ``retryable`` rule.

SharedOS (ADR 0023) lets a host run an interrupted turn again only when every
non-repeatable call it made came back denied or never entered its port. The host
sees both ports a turn can reach: the message transport (``messages.request``
accepts) and host tool handlers. Each is wrapped here to count calls that entered
and did not come back denied; tools classified ``read`` or annotated ``readOnly`` /
``idempotent`` are repeatable and not counted. The count lives in a context
variable set by the :class:`~sharedos_redis.worker.turns.TurnRunner` around one
turn, so tasks the runtime starts inside the turn count too.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass

from ..kernel.contracts import (
    AccessContext,
    JsonValue,
    MessageDeliveryResult,
    MessageEnvelope,
    ToolCall,
    ToolDefinition,
)
from ..kernel.ports import MessageTransport
from ..kernel.tools import ToolHandler

__all__ = ["EffectTrackingTransport", "TurnEffects", "repeatable", "tracked_handler", "tracking"]


@dataclass
class TurnEffects:
    """Non-repeatable calls of one turn that entered their port and were not denied."""

    entered: int = 0

    @property
    def retryable(self) -> bool:
        """Whether the turn may run again without repeating an effect."""
        return self.entered == 0


_current: ContextVar[TurnEffects | None] = ContextVar("sharedos_turn_effects", default=None)


@contextmanager
def tracking(effects: TurnEffects) -> Iterator[TurnEffects]:
    """Count the effects of calls made inside this block into ``effects``."""
    token = _current.set(effects)
    try:
        yield effects
    finally:
        _current.reset(token)


def repeatable(definition: ToolDefinition) -> bool:
    """Whether calling the tool again repeats no effect (read, read-only or idempotent)."""
    notes = definition.annotations
    return definition.read_write == "read" or bool(
        notes is not None and (notes.read_only or notes.idempotent))


class EffectTrackingTransport:
    """A :class:`MessageTransport` that counts accepted (or uncertain) deliveries."""

    def __init__(self, inner: MessageTransport) -> None:
        self._inner = inner
        # the wrapped transport's own capability (kernel.outbox), passed through
        self.writes_effect_audit = bool(getattr(inner, "writes_effect_audit", False))

    async def deliver(self, context: AccessContext,
                      envelope: MessageEnvelope) -> MessageDeliveryResult:
        """Deliver through the wrapped transport; only a ``denied`` result is no effect."""
        effects = _current.get()
        if effects is not None:
            effects.entered += 1  # an exception leaves it counted: the accept may have landed
        result = await self._inner.deliver(context, envelope)
        if effects is not None and result.status == "denied":
            effects.entered -= 1
        return result


def tracked_handler(definition: ToolDefinition, handler: ToolHandler) -> ToolHandler:
    """``handler``, counting each call as an effect unless the tool is :func:`repeatable`."""
    if repeatable(definition):
        return handler

    async def counted(context: AccessContext, call: ToolCall) -> JsonValue:
        effects = _current.get()
        if effects is not None:
            effects.entered += 1
        return await handler(context, call)

    return counted
