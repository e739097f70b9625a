"""The Redis request router: reply settlement, waiting, timeouts, cancellation (with its
cascade), inspection (pending, recent, one request's timeline, a trace's tree).

Depends on ``store`` and ``kernel``; imports no arq.
"""

from .inspection import PendingRequest, SettledRequest
from .listener import SettledListener
from .router import RedisRequestRouter, RouterSettings
from .tree import DelegationTree, TraceNode

__all__ = ["DelegationTree", "PendingRequest", "RedisRequestRouter", "RouterSettings",
           "SettledListener", "SettledRequest", "TraceNode"]
