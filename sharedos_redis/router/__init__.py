"""The Redis request router: reply settlement, waiting, timeouts, cancellation, inspection.

Depends on ``store`` and ``kernel``; imports no arq.
"""

from .inspection import PendingRequest, SettledRequest
from .listener import SettledListener
from .router import RedisRequestRouter, RouterSettings

__all__ = ["PendingRequest", "RedisRequestRouter", "RouterSettings", "SettledListener",
           "SettledRequest"]
