"""Inspection of open correlations, recent settlements and one request's audit timeline.

Owns ``PendingRequest``, ``SettledRequest`` and the reads behind
``RedisRequestRouter.pending``, ``.recent`` and ``.timeline`` (admin paths). Reads
only: the open index and markers in pipelines, the settled stream with XREVRANGE
pages, the audit stream with XRANGE pages. Imports no arq.
"""

from __future__ import annotations

from datetime import UTC, datetime

from pydantic import BaseModel, ConfigDict
from redis.asyncio import Redis

from ..errors import UnknownMessage
from ..kernel.contracts import AuditEvent
from ..store.audit import RedisAuditSink
from ..store.boundary import STORE_ERRORS, store_unavailable
from ..store.keys import Keys
from ..store.scripts import Scripts
from ..store.tree import RequestRecord, read_records

__all__ = ["PendingRequest", "SettledRequest", "list_pending", "list_recent", "read_timeline"]

_CHUNK = 500


class PendingRequest(BaseModel):
    """One open request as ``pending`` lists it.

    ``sender``/``recipient`` are decoded address tags such as ``"agent:bob"``.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    id: str
    sender: str
    recipient: str
    purpose: str
    trace_id: str
    state: str
    created_ms: int
    age_s: float
    deadline_ms: int
    attempts: int


class SettledRequest(BaseModel):
    """One settlement as ``recent`` lists it, newest first.

    ``state``/``code`` are what the settlement recorded (``code`` is empty for
    ``replied``; state ``expired`` is a record that vanished while open).
    ``sender``/``recipient``/``purpose``/``trace_id``/``attempts`` come from the
    request's record and are ``None`` once it is gone (retention passed).
    ``settled_at`` is the settlement's server time (RFC 3339, UTC).
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    id: str
    sender: str | None
    recipient: str | None
    purpose: str | None
    trace_id: str | None
    state: str
    code: str
    settled_at: str
    attempts: int | None


def _text(value: object) -> str:
    return value.decode() if isinstance(value, bytes) else "" if value is None else str(value)


def _pending(record: RequestRecord, now_ms: int) -> PendingRequest:
    return PendingRequest(id=record.id, sender=record.sender, recipient=record.recipient,
                          purpose=record.purpose, trace_id=record.trace_id, state=record.state,
                          created_ms=record.created_ms,
                          age_s=max(0, now_ms - record.created_ms) / 1000,
                          deadline_ms=record.deadline_ms, attempts=record.attempt)


def _wanted(row: PendingRequest, state: str | None, agent: str | None,
            older_than_s: float | None) -> bool:
    if state is not None and row.state != state:
        return False
    if agent is not None and f"agent:{agent}" not in (row.sender, row.recipient):
        return False
    return older_than_s is None or row.age_s >= older_than_s


async def list_pending(redis: Redis, namespace: str, *, state: str | None = None,
                       agent: str | None = None, older_than_s: float | None = None,
                       limit: int = 100) -> list[PendingRequest]:
    """Open requests of ``namespace``, earliest deadline first, filtered.

    Args:
        state: only this marker state (``accepted``, ``dispatched``, ``running``).
        agent: only requests from or to ``agent:<agent>``.
        older_than_s: only requests accepted at least this long ago (server clock).
        limit: the most rows returned.

    Raises:
        StoreUnavailable: Redis failed.
    """
    k, rows, start = Keys(namespace), list[PendingRequest](), 0
    try:
        now_ms = await Scripts(redis).now_ms(k.open)
        while len(rows) < limit:
            ids = [_text(i) for i in await redis.zrange(k.open, start, start + _CHUNK - 1)]
            if not ids:
                break
            records = await read_records(redis, namespace, ids)
            for mid in ids:  # a record gone between the index read and this one is skipped
                record = records.get(mid)
                row = None if record is None else _pending(record, now_ms)
                if row is not None and _wanted(row, state, agent, older_than_s):
                    rows.append(row)
            start += _CHUNK
    except STORE_ERRORS as exc:
        raise store_unavailable("pending", exc) from exc
    return rows[:limit]


def _settled_at(entry_id: str) -> str:
    millis = int(entry_id.partition("-")[0])
    moment = datetime.fromtimestamp(millis / 1000, UTC)
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")


async def _settlements(redis: Redis, key: str, limit: int) -> list[tuple[str, dict[str, str]]]:
    """The newest entry per request id, newest first, at most ``limit`` of them."""
    found: dict[str, tuple[str, dict[str, str]]] = {}
    upper, page = "+", max(limit, 100)
    while len(found) < limit:
        entries = await redis.xrevrange(key, upper, "-", count=page)
        fresh = [(_text(i), {_text(k): _text(v) for k, v in f.items()}) for i, f in entries
                 if _text(i) != upper]
        for entry_id, fields in fresh:
            if fields.get("id") and fields["id"] not in found and len(found) < limit:
                found[fields["id"]] = (entry_id, fields)
        if len(entries) < page or not fresh:
            break
        upper = fresh[-1][0]
    return list(found.values())


async def list_recent(redis: Redis, namespace: str, *, limit: int = 20) -> list[SettledRequest]:
    """The last ``limit`` requests of ``namespace`` that settled, newest first.

    Reads the settled stream (``HostSettings`` keeps its last ~10,000 entries) and
    each request's record; a request settled twice (a re-driven dead letter) is
    listed once, with its newest settlement.

    Raises:
        StoreUnavailable: Redis failed.
    """
    try:
        settlements = await _settlements(redis, Keys(namespace).settled, limit)
    except STORE_ERRORS as exc:
        raise store_unavailable("recent", exc) from exc
    records = await read_records(redis, namespace, [f["id"] for _, f in settlements])
    rows = []
    for entry_id, fields in settlements:
        record, state = records.get(fields["id"]), fields.get("state", "")
        rows.append(SettledRequest(
            id=fields["id"], sender=record and record.sender,
            recipient=record and record.recipient, purpose=record and record.purpose,
            trace_id=record and record.trace_id, state=state,
            code="" if state == "replied" else fields.get("result", ""),
            settled_at=_settled_at(entry_id), attempts=record and record.attempt))
    return rows


async def read_timeline(redis: Redis, namespace: str, message_id: str) -> list[AuditEvent]:
    """Every audit event naming ``message_id``, oldest first (scans the audit stream).

    Raises:
        UnknownMessage: no event names the request.
        StoreUnavailable: Redis failed.
    """
    sink, after, events = RedisAuditSink(redis), "-", list[AuditEvent]()
    while True:
        page = await sink.read(namespace, count=1000, after=after)
        events.extend(event for _, event in page if event.message_id == message_id)
        if len(page) < 1000:
            break
        after = page[-1][0]
    if not events:
        raise UnknownMessage(namespace, message_id)
    return events
