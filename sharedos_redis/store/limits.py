"""Every default limit and lifetime of the Redis host, stated once.

The settings models (``HostSettings``, ``TransportSettings``, ``RouterSettings``)
and the store classes' keyword defaults all read their defaults from here, so a
default cannot differ between the layers that share it.
"""

from __future__ import annotations

from typing import Final

__all__ = ["AUDIT_MAXLEN", "BUDGET_TTL_S", "DEAD_MAXLEN", "DEFAULT_HOPS", "MAX_PAYLOAD_BYTES",
           "REQUEST_TIMEOUT_S", "RETENTION_S", "ROUTE_CHECK", "ROUTE_LEASE_S", "SETTLED_MAXLEN"]

REQUEST_TIMEOUT_S: Final = 60.0
"""How long a request may stay open (its deadline from accept)."""
DEFAULT_HOPS: Final = 16
"""Hops a trace starts with (each accept or re-drive spends one)."""
BUDGET_TTL_S: Final = 86_400
"""Lifetime of a trace's hop budget, refreshed on every spend."""
RETENTION_S: Final = 86_400
"""How long an ended request's record is kept."""
MAX_PAYLOAD_BYTES: Final = 1_048_576
"""The largest request payload (compact UTF-8 JSON); replies default to it too."""
AUDIT_MAXLEN: Final = 100_000
"""``MAXLEN ~`` of a namespace's audit stream."""
SETTLED_MAXLEN: Final = 10_000
"""``MAXLEN ~`` of a namespace's settlement stream."""
DEAD_MAXLEN: Final = 100_000
"""``MAXLEN ~`` of a namespace's dead-letter stream."""
ROUTE_LEASE_S: Final = 30.0
"""How long a worker's entry in the agent directory (its route lease) lasts unrefreshed;
a running worker refreshes it every third of this."""
ROUTE_CHECK: Final = True
"""Whether the accept script refuses a request no live worker serves (the route check)."""
