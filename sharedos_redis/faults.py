"""Test-only fault injection: exit the process hard at a named step of the delivery path.

The package reads ``SHAREDOS_FAULT`` once, at import; when it is unset (always, in
production) every :func:`fault_point` is a no-op comparison. When it names a step,
the process calls ``os._exit(FAULT_EXIT_CODE)`` there — no cleanup, no finally
blocks, exactly like a SIGKILL at that instant. The named steps, in path order:

- ``accept.after``          requester: the accept script committed, receipt not returned
- ``relay.before_wake``     relay: entry read, turn not yet enqueued
- ``relay.after_wake``      relay: turn enqueued, marker not yet ``dispatched`` / entry not acked
- ``turn.before_claim``     worker: job started, lease not yet claimed
- ``turn.after_claim``      worker: lease claimed (``running``), runtime not started
- ``turn.before_settle``    worker: turn finished, outcome not yet settled
- ``turn.after_settle``     worker: outcome settled, job not finished
- ``listener.before_wake``  requester: a settlement seen (its entry read, a re-check or the
                            waiter's first read found the marker settled), waiter not yet
                            given it
- ``reconciler.between``    worker: in the reconciler, between its steps
"""

from __future__ import annotations

import os
from typing import Final

__all__ = ["FAULT_EXIT_CODE", "FAULT_POINTS", "fault_point"]

FAULT_EXIT_CODE: Final = 77
FAULT_POINTS: Final = (
    "accept.after", "relay.before_wake", "relay.after_wake", "turn.before_claim",
    "turn.after_claim", "turn.before_settle", "turn.after_settle", "listener.before_wake",
    "reconciler.between",
)
_ACTIVE: Final = os.environ.get("SHAREDOS_FAULT") or None


def fault_point(name: str) -> None:
    """Exit the process at once if ``SHAREDOS_FAULT`` names this step (tests only)."""
    if _ACTIVE is not None and name == _ACTIVE:
        os._exit(FAULT_EXIT_CODE)
