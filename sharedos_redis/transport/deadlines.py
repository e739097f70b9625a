"""The running turn's deadline, which caps the deadline of every nested request.

Owns ``turn_deadline_ms`` and ``deadline_scope``. The worker sets the deadline
while a recipient's turn runs; a ``messages.request`` made inside that turn is
accepted with ``min(now + request_timeout, turn deadline)``, so a nested request
never outlives the turn that waits for it. Context variables follow anyio tasks.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar

__all__ = ["deadline_scope", "turn_deadline_ms"]

turn_deadline_ms: ContextVar[int | None] = ContextVar("turn_deadline_ms", default=None)
"""The current turn's deadline, ms since the epoch; None outside a turn."""


@contextmanager
def deadline_scope(deadline_ms: int) -> Iterator[None]:
    """Run the block with the turn deadline set to ``deadline_ms``.

    A nested scope never extends an outer one: the effective deadline is the
    earlier of the two.
    """
    outer = turn_deadline_ms.get()
    effective = deadline_ms if outer is None else min(outer, deadline_ms)
    token = turn_deadline_ms.set(effective)
    try:
        yield
    finally:
        turn_deadline_ms.reset(token)
