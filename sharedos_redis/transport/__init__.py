"""The Redis Streams transport: idempotent accept, the outbox relay, turn deadlines.

Owns ``RedisStreamTransport`` (the kernel's MessageTransport), ``OutboxRelay``
and the turn-deadline context variable. Imports store and kernel; never router
or worker.
"""

from .deadlines import deadline_scope, turn_deadline_ms
from .relay import OutboxRelay, WakeHook
from .transport import AcceptHook, RedisStreamTransport, TransportSettings

__all__ = [
    "AcceptHook",
    "OutboxRelay",
    "RedisStreamTransport",
    "TransportSettings",
    "WakeHook",
    "deadline_scope",
    "turn_deadline_ms",
]
