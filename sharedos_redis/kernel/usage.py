"""Exact use accounting (SharedOS ADR 0029): a reserved use, released only before admission.

Owns :class:`UseReservation` and the :data:`reserved_use` context variable. A
``maxUses`` use is reserved when the authorizer allows a consuming decision. For
a message, the effect is admitted when the transport accepts the request; a
refusal before that (payload size, trace budget, duplicate, no route) releases
the use together with a ``grant.usage.released`` audit record, and a transport
that can do both atomically with its refusal marks the reservation ``released``.
After admission a use stays spent, whatever the effect's outcome. Imports no I/O
library.
"""

from __future__ import annotations

from contextvars import ContextVar
from dataclasses import dataclass

__all__ = ["UseReservation", "reserved_use"]


@dataclass
class UseReservation:
    """One reserved ``maxUses`` use, pending admission of the effect it pays for.

    Attributes:
        namespace_id: the grant's namespace.
        grant_id: the grant whose use is reserved.
        released: set by a transport that released the use atomically with its refusal.
    """

    namespace_id: str
    grant_id: str
    released: bool = False


reserved_use: ContextVar[UseReservation | None] = ContextVar("sharedos_reserved_use",
                                                             default=None)
"""The reservation the message being delivered carries; None when it reserved none."""
