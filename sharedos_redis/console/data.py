"""What the console shows, read from Redis: pending requests, one request's timeline,
a trace's delegation tree, dead letters and per-namespace health.

Reads only (no script, no write). Scans the audit stream for a timeline, like
``sharedos-redis show``: an admin path, never a hot one; a tree is the trace index and
its requests' records (:mod:`sharedos_redis.store.tree`, the one reader of records).
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import anyio
from redis.asyncio import Redis
from redis.exceptions import RedisError, ResponseError

from ..errors import SharedOSError, StoreUnavailable
from ..kernel.contracts import AuditEvent
from ..router.inspection import PendingRequest, list_pending
from ..store.audit import RedisAuditSink
from ..store.client import RedisSettings, create_redis
from ..store.keys import RELAY_GROUP, STATES, Keys
from ..store.markers import MarkerStore
from ..store.tree import RequestRecord, read_records, read_trace
from .tree import Accepted, TreeNode, build_tree, layout

__all__ = ["Health", "HealthPoller", "TraceTree", "dead_letters", "health", "pending",
           "request_view", "trace_tree"]

_Record = dict[str, str | None]
_WORKER_SEEN_MS = 60_000
_OUTCOME_WINDOW = 1000
_AUDIT_PAGE = 1000


def _text(value: object) -> str | None:
    if value is None:
        return None
    return value.decode() if isinstance(value, bytes) else str(value)


async def _io(operation: str, call: Any) -> Any:
    try:
        return await call
    except (RedisError, OSError) as exc:
        raise StoreUnavailable(operation, type(exc).__name__) from exc


async def pending(redis: Redis, namespace: str, *, state: str | None, agent: str | None,
                  older_than_s: float | None, limit: int = 200) -> list[PendingRequest]:
    """Open requests, earliest deadline first (see ``RedisRequestRouter.pending``)."""
    return await list_pending(redis, namespace, state=state, agent=agent,
                              older_than_s=older_than_s, limit=limit)


def _as_record(r: RequestRecord) -> _Record:
    return {"state": r.state, "code": r.code, "created": str(r.created_ms),
            "updated": str(r.updated_ms), "from": r.sender, "to": r.recipient,
            "purpose": r.purpose, "trace": r.trace_id, "deadline": str(r.deadline_ms),
            "attempts": str(r.attempt), "parent": r.parent}


async def _records(redis: Redis, namespace: str, ids: list[str]) -> dict[str, _Record]:
    found = await read_records(redis, namespace, ids)
    return {mid: _as_record(record) for mid, record in found.items()}


async def _audit(redis: Redis, namespace: str, *, trace_id: str | None = None,
                 message_id: str | None = None) -> list[AuditEvent]:
    sink, after, events = RedisAuditSink(redis), "-", list[AuditEvent]()
    while True:
        page = await sink.read(namespace, count=_AUDIT_PAGE, after=after)
        events.extend(event for _, event in page
                      if (trace_id is None or event.trace_id == trace_id)
                      and (message_id is None or event.message_id == message_id))
        if len(page) < _AUDIT_PAGE:
            return events
        after = page[-1][0]


async def request_view(redis: Redis, namespace: str,
                       message_id: str) -> tuple[_Record | None, list[AuditEvent]]:
    """One request's record (None once expired) and its audit timeline."""
    records = await _records(redis, namespace, [message_id])
    return records.get(message_id), await _audit(redis, namespace, message_id=message_id)


@dataclass
class TraceTree:
    """A laid-out delegation forest of one trace."""

    roots: list[TreeNode]
    width: int
    height: int

    @property
    def nodes(self) -> list[TreeNode]:
        """Every node, depth first."""
        return [node for root in self.roots for node in root.walk()]


async def trace_tree(redis: Redis, namespace: str, trace_id: str) -> TraceTree:
    """The delegation tree of ``trace_id`` from its requests' recorded parents (the
    trace index and one pipeline of record reads; see :mod:`.tree`)."""
    found = await read_trace(redis, namespace, trace_id)
    requests = [Accepted(r.id, r.sender, r.recipient, r.parent) for r in found]
    roots = build_tree(requests, {r.id: _as_record(r) for r in found})
    width, height = layout(roots)
    return TraceTree(roots, width, height)


async def dead_letters(redis: Redis, namespace: str, *, count: int = 200) -> list[dict[str, str]]:
    """The oldest ``count`` dead letters with the request's current state."""
    rows = await MarkerStore(redis).dead_letters(namespace, count=count)
    records = await _records(redis, namespace, [row.get("id", "") for row in rows])
    for row in rows:
        record = records.get(row.get("id", ""), {})
        row["state"] = record.get("state") or "expired"
        row["sender"], row["recipient"] = record.get("from") or "", record.get("to") or ""
    return rows


@dataclass
class Health:
    """One namespace at a glance."""

    namespace: str
    pending_by_state: dict[str, int] = field(default_factory=dict)
    outbox_depth: int = 0
    relay_lag_s: float = 0.0
    dead_letters: int = 0
    workers_seen: list[str] = field(default_factory=list)
    outcomes: dict[str, int] = field(default_factory=dict)


async def health(redis: Redis, namespace: str) -> Health:
    """Pending by state, outbox depth and age, dead letters, live relays, recent outcomes."""
    k, found = Keys(namespace), Health(namespace)
    seconds, micros = await _io("time", redis.time())
    now_ms = int(seconds) * 1000 + int(micros) // 1000
    ids = [_text(i) or "" for i in await _io("open", redis.zrange(k.open, 0, 9999))]
    states = Counter(r["state"] for r in (await _records(redis, namespace, ids)).values())
    found.pending_by_state = {s: states.get(s, 0) for s in STATES[:3]}
    found.outbox_depth = int(await _io("outbox", redis.xlen(k.outbox)))
    oldest = await _io("outbox", redis.xrange(k.outbox, "-", "+", count=1))
    if oldest:
        entry_ms = int((_text(oldest[0][0]) or "0").split("-")[0])
        found.relay_lag_s = max(0, now_ms - entry_ms) / 1000
    found.dead_letters = int(await _io("dead", redis.xlen(k.dead)))
    found.workers_seen = await _workers(redis, k)
    recent = await _io("settled", redis.xrevrange(k.settled, "+", "-", count=_OUTCOME_WINDOW))
    found.outcomes = dict(Counter(_text(fields.get(b"state", fields.get("state"))) or "?"
                                  for _, fields in recent))
    return found


async def _workers(redis: Redis, k: Keys) -> list[str]:
    """Relay consumers (one per worker process) active in the last minute."""
    try:
        consumers = await redis.xinfo_consumers(k.outbox, RELAY_GROUP)
    except ResponseError:  # no outbox or no group yet: no worker ever ran
        return []
    except (RedisError, OSError) as exc:
        raise StoreUnavailable("workers", type(exc).__name__) from exc
    seen = []
    for consumer in consumers:
        info = {(_text(key) or ""): value for key, value in consumer.items()}
        if int(info.get("idle", _WORKER_SEEN_MS)) < _WORKER_SEEN_MS:
            seen.append(_text(info.get("name")) or "?")
    return sorted(seen)


class HealthPoller:
    """:func:`health` of ``namespaces`` read synchronously, for gauges collected in a
    thread (the worker's Prometheus server): each read opens a client in its own event
    loop; a snapshot younger than ``max_age_s`` is reused by the next gauge."""

    def __init__(self, connection: RedisSettings, namespaces: Sequence[str], *,
                 max_age_s: float = 1.0) -> None:
        self._connection, self._namespaces = connection, tuple(namespaces)
        self._max_age_s, self._lock = max_age_s, threading.Lock()
        self._at, self._last = -float("inf"), list[Health]()

    def __call__(self) -> list[Health]:
        """The snapshots (the last good ones when Redis fails: a scrape never raises)."""
        with self._lock:
            if time.monotonic() - self._at >= self._max_age_s:
                # stale gauges beat a failed scrape; the next scrape retries
                with contextlib.suppress(SharedOSError):
                    self._last = anyio.run(self._read)
                self._at = time.monotonic()
            return self._last

    async def _read(self) -> list[Health]:
        redis = create_redis(self._connection)
        try:
            return [await health(redis, ns) for ns in self._namespaces]
        finally:
            await redis.aclose()
