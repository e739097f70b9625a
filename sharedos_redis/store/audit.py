"""The Redis audit sink: one append-only stream per namespace.

Owns ``RedisAuditSink`` (the kernel's ``AuditSink``) and ``audit_fields``, the
stream entry layout (one field ``e`` holding the event's wire JSON) so Lua
scripts can append the same record atomically with their effect. Payloads never
reach this module: ``AuditEvent`` has no field for them.
"""

from __future__ import annotations

from typing import Final

from redis.asyncio import Redis
from redis.exceptions import RedisError

from ..errors import AuditUnavailable, StoreUnavailable
from ..kernel.contracts import AuditEvent
from .keys import Keys

__all__ = ["AUDIT_FIELD", "RedisAuditSink", "audit_fields"]

AUDIT_FIELD: Final = "e"
"""The one field of an audit stream entry: the event's wire JSON."""


def audit_fields(event: AuditEvent) -> list[str]:
    """The XADD field/value list of ``event`` (``["e", <wire JSON>]``)."""
    return [AUDIT_FIELD, event.to_json()]


class RedisAuditSink:
    """Appends audit events to ``sos:{ns}:audit`` (trimmed ``MAXLEN ~ maxlen``)."""

    def __init__(self, redis: Redis, *, maxlen: int = 100_000) -> None:
        self._redis = redis
        self._maxlen = maxlen

    async def record(self, event: AuditEvent) -> None:
        """Durably append one event to its namespace's audit stream.

        Raises:
            AuditUnavailable: Redis refused or could not be reached.
        """
        key = Keys(event.namespace_id).audit
        try:
            await self._redis.xadd(key, {AUDIT_FIELD: event.to_json()},
                                   maxlen=self._maxlen, approximate=True)
        except (RedisError, OSError) as exc:
            raise AuditUnavailable(f"audit record not written: {type(exc).__name__}") from exc

    async def read(
        self, namespace_id: str, *, count: int = 1000, after: str = "-"
    ) -> list[tuple[str, AuditEvent]]:
        """Read up to ``count`` events, oldest first, strictly after stream id ``after``.

        Args:
            namespace_id: the namespace whose stream is read.
            count: the most events returned.
            after: a stream id from an earlier read (exclusive), or ``"-"`` for the start.

        Returns:
            ``(stream id, event)`` pairs.

        Raises:
            StoreUnavailable: Redis failed.
            ContractError: a stored record is not a valid event.
        """
        start = after if after == "-" else f"({after}"
        try:
            entries = await self._redis.xrange(Keys(namespace_id).audit, start, "+", count=count)
        except (RedisError, OSError) as exc:
            raise StoreUnavailable("audit.read", type(exc).__name__) from exc
        field = AUDIT_FIELD.encode()
        return [(entry_id.decode(), AuditEvent.from_json(fields[field]))
                for entry_id, fields in entries]
