"""The host's telemetry hooks: a no-op :class:`Telemetry` and the process-wide selector.

Call sites in the transport, relay, turn runner, reconciler and host call
``telemetry().<hook>(...)``. Without OpenTelemetry (the ``otel`` extra) every hook
is a no-op that allocates nothing; with it, :mod:`.otel` records spans and metrics
through the OpenTelemetry API (which itself does nothing until the application
installs an SDK). Hooks take the host's own objects and build attributes
themselves, so a disabled hook costs one call. Imports no OpenTelemetry.
"""

from __future__ import annotations

import importlib.util
import os
from collections.abc import Iterable, Mapping
from contextlib import AbstractContextManager, nullcontext
from typing import TYPE_CHECKING

from ..kernel.contracts import AccessContext, MessageEnvelope, ToolDefinition

if TYPE_CHECKING:
    from ..kernel.kernel import Kernel

__all__ = ["SpanHandle", "Telemetry", "configure", "telemetry"]


class SpanHandle:
    """What a call site may say about the span it is in: only a closed outcome code."""

    def outcome(self, code: str) -> None:
        """Record the outcome code (``replied`` or a reason code) of the span's work."""


_NOOP_HANDLE = SpanHandle()
_NOOP_SPAN: AbstractContextManager[SpanHandle] = nullcontext(_NOOP_HANDLE)  # reusable


class Telemetry:
    """No-op hooks (the default without the ``otel`` extra)."""

    enabled = False

    def instrument_kernel(self, kernel: Kernel) -> None:
        """Trace every tool call of ``kernel`` (``messages.request`` included)."""

    def traceparent(self) -> str:
        """The W3C ``traceparent`` of the current span, or ``""`` (stored at accept)."""
        return ""

    def accept_span(self, context: AccessContext,
                    envelope: MessageEnvelope) -> AbstractContextManager[SpanHandle]:
        """The span of one accept (the durable write of a request)."""
        return _NOOP_SPAN

    def dispatch_span(self, namespace: str, message_id: str | None, entry_id: str,
                      traceparent: str | None) -> AbstractContextManager[SpanHandle]:
        """The relay's span for one outbox entry; also records the relay lag."""
        return _NOOP_SPAN

    def turn_span(self, namespace: str, request: MessageEnvelope, *, attempt: int,
                  traceparent: str | None,
                  tools: Iterable[ToolDefinition] = ()) -> AbstractContextManager[SpanHandle]:
        """One recipient turn (one attempt), child of the requester's span when
        ``traceparent`` is set; records the turn duration by outcome."""
        return _NOOP_SPAN

    def settle_span(self, namespace: str,
                    request: MessageEnvelope) -> AbstractContextManager[SpanHandle]:
        """The settlement of one request by its recipient's turn."""
        return _NOOP_SPAN

    def reconciled(self, namespace: str, counts: Mapping[str, int]) -> None:
        """Count one reconciler pass's actions (``timed_out``, ``rerun``, ...)."""


_NOOP = Telemetry()
_current: Telemetry | None = None


def _installed() -> bool:
    return importlib.util.find_spec("opentelemetry") is not None


def configure(enabled: bool | None = None) -> Telemetry:
    """Choose this process's hooks: OpenTelemetry's or the no-op ones.

    Args:
        enabled: ``None`` picks OpenTelemetry when ``opentelemetry-api`` is installed
            and ``OTEL_SDK_DISABLED`` is not ``true``; ``False`` forces the no-op
            hooks; ``True`` requires the API. Hosts built afterwards use the choice
            (a host instruments its kernel when it is built).

    Returns:
        The hooks now in force.

    Raises:
        ModuleNotFoundError: ``enabled=True`` without ``opentelemetry-api``.
    """
    global _current
    if enabled is None:
        disabled = os.environ.get("OTEL_SDK_DISABLED", "").strip().lower() == "true"
        enabled = _installed() and not disabled
    if enabled:
        from .otel import OtelTelemetry

        _current = OtelTelemetry()
    else:
        _current = _NOOP
    return _current


def telemetry() -> Telemetry:
    """The hooks in force (chosen on first use, see :func:`configure`)."""
    return _current if _current is not None else configure()
