"""The Redis audit sink: one append-only stream per namespace.

Owns ``RedisAuditSink`` (the kernel's ``AuditSink``) and the stream entry layout,
so Lua scripts can append the same records atomically with their effect. Payloads
never reach this module: ``AuditEvent`` has no field for them.

The entry layout (issue 11: one XADD per atomic write, the records' shared
attribution stored once). An entry holds one record or several written together:

* one record: field ``e``, the event's wire JSON (:func:`audit_fields`);
* several: field ``h``, the attribution the records share (the first record's
  ``version``, ``traceId``, ``namespaceId``, ``actor``, ``authority``, ``owner``,
  ``purpose``), then ``e``, ``e2``, ``e3``, ... in order, each the record's wire JSON
  without the keys whose value equals ``h``'s; an attribution key the record lacks
  is ``null`` (:func:`compact`, and ``audit_flush`` in ``lua/_prelude.lua``).

:func:`decode_entry` is the one reader: each record is ``h`` merged with it, nulls
dropped, parsed as ``AuditEvent``. Every record keeps its own ``id``, so readers still
deduplicate by ``AuditEvent.id`` (ADR 0029).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping, Sequence
from typing import Any, Final

import anyio
from anyio.abc import TaskStatus
from redis.asyncio import Redis

from ..errors import AuditUnavailable
from ..kernel.contracts import AuditEvent
from .boundary import STORE_ERRORS, Backoff, store_unavailable
from .keys import Keys
from .limits import AUDIT_MAXLEN

__all__ = ["AUDIT_FIELD", "ATTRIBUTION", "HEAD_FIELD", "RedisAuditSink", "audit_fields",
           "compact", "compact_records", "decode_entry", "entry_wires"]

_log = logging.getLogger("sharedos_redis.audit")

AUDIT_FIELD: Final = "e"
"""The one field of an audit stream entry: the event's wire JSON."""


HEAD_FIELD: Final = "h"
"""The field of a several-record entry holding the attribution its records share."""

ATTRIBUTION: Final = ("version", "traceId", "namespaceId", "actor", "authority", "owner",
                      "purpose")
"""The wire keys the records of one entry share in ``h`` (see the module doc)."""


def audit_fields(event: AuditEvent) -> list[str]:
    """The XADD field/value list of ``event`` alone (``["e", <wire JSON>]``)."""
    return [AUDIT_FIELD, event.to_json()]


def _dumps(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def _record_field(index: int) -> str:
    """The field of the ``index``-th record (from 0) of an entry: e, e2, e3, ..."""
    return AUDIT_FIELD if index == 0 else f"{AUDIT_FIELD}{index + 1}"


def compact_records(events: Sequence[AuditEvent]) -> tuple[str, list[str]]:
    """``(h, records)`` for a script to write as one entry (``audit_open`` and
    ``audit_add`` in ``lua/_prelude.lua``): the first event's attribution and each
    event compacted against it; ``("", [])`` for no events."""
    if not events:
        return "", []
    wires = [event.to_wire() for event in events]
    head = {key: wires[0][key] for key in ATTRIBUTION if key in wires[0]}
    records = []
    for wire in wires:
        record = {key: value for key, value in wire.items()
                  if key not in head or head[key] != value}
        record.update({key: None for key in head if key not in wire})
        records.append(_dumps(record))
    return _dumps(head), records


def compact(events: Sequence[AuditEvent]) -> list[str]:
    """The XADD field/value list of one entry holding ``events`` (see the module doc)."""
    if len(events) == 1:
        return audit_fields(events[0])
    head, records = compact_records(events)
    fields = [HEAD_FIELD, head]
    for index, record in enumerate(records):
        fields += [_record_field(index), record]
    return fields


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


def _index(field: str) -> int:
    """0 for ``e``, n - 1 for ``e<n>``, -1 for any other field."""
    if field == AUDIT_FIELD:
        return 0
    rest = field[len(AUDIT_FIELD):]
    return int(rest) - 1 if field.startswith(AUDIT_FIELD) and rest.isdigit() else -1


def entry_wires(fields: Mapping[bytes, bytes] | Mapping[str, str]) -> list[dict[str, Any]]:
    """The records of one audit stream entry as decoded JSON objects, in the order they
    were written (each merged with the entry's header, nulls dropped; not validated)."""
    text = {_text(name): _text(value) for name, value in fields.items()}
    numbered = sorted((index, name) for name in text if (index := _index(name)) >= 0)
    head = text.get(HEAD_FIELD)
    shared: dict[str, Any] = json.loads(head) if head else {}
    wires = []
    for _, name in numbered:
        merged = {**shared, **json.loads(text[name])}
        wires.append({key: value for key, value in merged.items() if value is not None})
    return wires


def decode_entry(fields: Mapping[bytes, bytes] | Mapping[str, str]) -> list[AuditEvent]:
    """The records of one audit stream entry, in the order they were written.

    Raises:
        ContractError: a record is not a valid event.
        ValueError: a field is not JSON.
    """
    return [AuditEvent.from_wire(wire) for wire in entry_wires(fields)]


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
        by_namespace: dict[str, list[AuditEvent]] = {}
        for event in events:
            by_namespace.setdefault(event.namespace_id, []).append(event)
        try:
            if len(by_namespace) == 1:  # one entry: the usual case
                await self._xadd(self._redis, *by_namespace.items())
                return
            pipe = self._redis.pipeline(transaction=False)
            for item in by_namespace.items():
                self._xadd(pipe, item)  # queued on the pipeline
            await pipe.execute()
        except STORE_ERRORS as exc:
            raise AuditUnavailable(f"audit record not written: {type(exc).__name__}") from exc

    def _xadd(self, client: Any, item: tuple[str, list[AuditEvent]]) -> Any:
        """The XADD of ``item``'s events (a namespace and its records) as one entry."""
        flat = compact(item[1])
        fields = dict(zip(flat[::2], flat[1::2], strict=True))
        return client.xadd(Keys(item[0]).audit, fields, maxlen=self._maxlen, approximate=True)

    async def read(
        self, namespace_id: str, *, count: int = 1000, after: str = "-"
    ) -> list[tuple[str, AuditEvent]]:
        """Read up to ``count`` entries' events, oldest first, strictly after stream id
        ``after`` (an entry may hold several records written together; they share its id).

        Args:
            namespace_id: the namespace whose stream is read.
            count: the most stream entries read.
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
        return [(entry_id.decode(), event)
                for entry_id, fields in entries for event in decode_entry(fields)]
