"""The Redis audit sink: one append-only stream per namespace.

Owns ``RedisAuditSink`` (the kernel's ``AuditSink``) and ``audit_fields``, the
stream entry layout (one field ``e`` holding the event's wire JSON) so Lua
scripts can append the same record atomically with their effect. Payloads never
reach this module: ``AuditEvent`` has no field for them.
"""

from __future__ import annotations

import logging
from typing import Final

import anyio
from anyio.abc import TaskStatus
from redis.asyncio import Redis

from ..errors import AuditUnavailable
from ..kernel.contracts import AuditEvent
from .boundary import STORE_ERRORS, Backoff, store_unavailable
from .keys import Keys
from .limits import AUDIT_MAXLEN

__all__ = ["AUDIT_FIELD", "RedisAuditSink", "audit_fields"]

_log = logging.getLogger("sharedos_redis.audit")

AUDIT_FIELD: Final = "e"
"""The one field of an audit stream entry: the event's wire JSON."""


def audit_fields(event: AuditEvent) -> list[str]:
    """The XADD field/value list of ``event`` (``["e", <wire JSON>]``)."""
    return [AUDIT_FIELD, event.to_json()]


class RedisAuditSink:
    """Appends audit events to ``sos:{ns}:audit`` (trimmed ``MAXLEN ~ maxlen``).

    ``record`` writes before it returns (before-effect records). While :meth:`run`
    runs (the host runs it inside ``async with host``), ``record_later`` queues
    after-effect records and the background writer appends them in order, batched
    in one pipeline; ``record`` also carries whatever is queued, ahead of its own
    event, so the stream keeps the order in which records were made. A queued
    record is lost only if the process dies before it is written; while Redis is
    down records stay queued and are retried with back-off; at most ``max_pending``
    wait (beyond that the oldest are dropped, logged and counted in ``dropped``).

    ``linger_s``: how long the writer waits after a wake-up before it writes, so
    records gather and a settlement script can carry them instead
    (:meth:`take_queued`: the marker store appends them ahead of its own record, in
    the same atomic script; the host uses 2 ms).
    """

    def __init__(self, redis: Redis, *, maxlen: int = AUDIT_MAXLEN,
                 max_pending: int = 10_000, linger_s: float = 0.0) -> None:
        self._redis = redis
        self._linger_s = linger_s
        self._maxlen = maxlen
        self._max_pending = max_pending
        self._pending: list[AuditEvent] = []
        self._wakeup: anyio.Event | None = None
        self._stopping = False
        self.dropped = 0

    async def record(self, event: AuditEvent) -> None:
        """Durably append one event (after anything queued) to its namespace's stream.

        Raises:
            AuditUnavailable: Redis refused or could not be reached.
        """
        queued, self._pending = self._pending, []
        try:
            await self._write([*queued, event])
        except AuditUnavailable:
            self._pending[:0] = queued  # the background writer retries them
            raise

    def take_queued(self, namespace_id: str) -> list[AuditEvent]:
        """Remove and return the queued records of ``namespace_id``, in order, for a
        script to append ahead of its own records (atomically, saving the writer's round
        trip); hand them back with :meth:`give_back` if the script failed."""
        taken = [event for event in self._pending if event.namespace_id == namespace_id]
        if taken:
            self._pending = [e for e in self._pending if e.namespace_id != namespace_id]
        return taken

    def give_back(self, events: list[AuditEvent]) -> None:
        """Queue ``events`` (from :meth:`take_queued`) again, ahead of newer records."""
        if events:
            self._requeue(events)  # without a running writer the next ``record`` carries them
            if self._wakeup is not None:
                self._wakeup.set()

    def record_later(self, event: AuditEvent) -> bool:
        """Queue an after-effect record for the background writer (see the class doc).

        Returns:
            False when the writer is not running: the caller writes with ``record``.
        """
        if self._wakeup is None or self._stopping:
            return False
        if len(self._pending) >= self._max_pending:
            del self._pending[0]
            self.dropped += 1
        self._pending.append(event)
        self._wakeup.set()
        return True

    async def run(self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        """The background writer; returns after :meth:`stop` once the queue is written.

        A failed write keeps the records queued (in order, still bounded by
        ``max_pending``) and is retried with back-off, so an outage delays records
        instead of losing them.
        """
        self._stopping, self._wakeup = False, anyio.Event()
        backoff = Backoff("audit writer", _log)
        task_status.started()
        try:
            while not self._stopping:
                await self._wakeup.wait()
                if self._linger_s > 0 and not self._stopping:
                    await anyio.sleep(self._linger_s)  # a settlement may carry them meanwhile
                self._wakeup = anyio.Event()
                error = await self._flush()
                if error is None:
                    backoff.reset()
                    continue
                await backoff.wait(error)
                self._wakeup.set()
        finally:
            self._wakeup = None
            with anyio.move_on_after(2, shield=True):
                await self._flush()

    def stop(self) -> None:
        """Ask the writer to write what is queued and return."""
        self._stopping = True
        if self._wakeup is not None:
            self._wakeup.set()

    async def _flush(self) -> AuditUnavailable | None:
        queued, self._pending = self._pending, []
        if not queued:
            return None
        try:
            await self._write(queued)
        except AuditUnavailable as exc:
            self._requeue(queued)
            return exc
        return None

    def _requeue(self, queued: list[AuditEvent]) -> None:
        """Put unwritten records back in front of newer ones, keeping the bound."""
        merged = [*queued, *self._pending]
        overflow = max(0, len(merged) - self._max_pending)
        if overflow:
            _log.warning("%d audit records dropped: the queue is full", overflow)
            self.dropped += overflow
        self._pending = merged[overflow:]

    async def _write(self, events: list[AuditEvent]) -> None:
        try:
            if len(events) == 1:
                await self._redis.xadd(Keys(events[0].namespace_id).audit,
                                       {AUDIT_FIELD: events[0].to_json()},
                                       maxlen=self._maxlen, approximate=True)
                return
            pipe = self._redis.pipeline(transaction=False)
            for event in events:
                pipe.xadd(Keys(event.namespace_id).audit, {AUDIT_FIELD: event.to_json()},
                          maxlen=self._maxlen, approximate=True)
            await pipe.execute()
        except STORE_ERRORS as exc:
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
        except STORE_ERRORS as exc:
            raise store_unavailable("audit.read", exc) from exc
        field = AUDIT_FIELD.encode()
        return [(entry_id.decode(), AuditEvent.from_json(fields[field]))
                for entry_id, fields in entries]
