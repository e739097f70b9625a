"""Before-effect audit records written atomically with the effect (SharedOS ADR 0029).

Owns :class:`EffectAudit` and the :data:`effect_audit` context variable. When the
message transport declares ``writes_effect_audit``, the kernel opens an
``EffectAudit`` around consuming the send requirement and delivering: the
authorizer puts the allowed decision's ``authorization.checked`` record there
instead of writing it, and the transport appends it in the same atomic operation
that accepts (or refuses) the request, then empties it. Whatever the transport
did not take (it refused before writing anything, or failed) the kernel writes
right after the transport returned, before any later record of the request. So
no effect happens without its decision's record, in one round trip.

``on_accept`` holds the after-effect record of an accepted request
(``message.sent``, succeeded), prepared before delivery: the transport appends it
in the same operation only if it accepts, and sets ``on_accept_written``; else
the kernel records the receipt as usual. Imports no I/O library.
"""

from __future__ import annotations

from contextvars import ContextVar
from dataclasses import dataclass, field

from .contracts import AuditEvent

__all__ = ["EffectAudit", "effect_audit"]


@dataclass
class EffectAudit:
    """Before-effect records waiting for the effect that writes them (in order), and
    the records to write only if the effect happens."""

    events: list[AuditEvent] = field(default_factory=list)
    on_accept: list[AuditEvent] = field(default_factory=list)
    on_accept_written: bool = False


effect_audit: ContextVar[EffectAudit | None] = ContextVar("sharedos_effect_audit",
                                                          default=None)
"""The open outbox of the effect being decided and delivered; None outside one."""
