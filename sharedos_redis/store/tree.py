"""The delegation tree of a trace: typed request records, read in one pipeline, and the
cascade that ends a terminal request's open descendants.

Owns ``RequestRecord`` (the one reader of a request record's inspection fields),
``read_records``, ``read_trace`` and ``cascade_cancel`` (script ``cascade_cancel``).
Every accepted request is in its trace's index (``Keys.trace``, id → accept ms) and
records the request whose turn made it (``parent``); the tree is those links. Reads
take two round trips however large the trace (the index, then one pipeline of HMGETs).
Imports no arq.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any, Final

from pydantic import BaseModel, ConfigDict
from redis.asyncio import Redis

from ..kernel.contracts import format_timestamp
from ..kernel.ids import new_id
from .boundary import STORE_ERRORS, store_unavailable
from .keys import OPEN_STATES, Keys, decode_id
from .limits import AUDIT_MAXLEN, RETENTION_S, SETTLED_MAXLEN
from .scripts import Scripts

__all__ = ["CASCADE_CODE", "RECORD_FIELDS", "RequestRecord", "cascade_cancel", "read_records",
           "read_trace"]

CASCADE_CODE: Final = "request_cascade_cancelled"
"""Reason of a request cancelled because an ancestor ended first."""

RECORD_FIELDS: Final = ("from", "to", "purpose", "trace", "state", "created", "updated",
                        "deadline", "attempts", "code", "parent")
_RETRIES: Final = 5


def _text(value: object) -> str:
    return value.decode() if isinstance(value, bytes) else "" if value is None else str(value)


def _address(tag: str) -> str:
    kind, _, ident = tag.partition(":")
    return f"{kind}:{decode_id(ident)}"


class RequestRecord(BaseModel):
    """One request as its record stores it (the fields inspection shows).

    ``sender``/``recipient`` are decoded address tags such as ``"agent:bob"``;
    ``parent`` is the request whose turn made it (``None`` for a root); ``attempt`` is
    the number of turns started; ``code`` the reason a request ended without a reply
    (``None`` while open or when replied); ``updated_ms`` its last transition.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    id: str
    parent: str | None
    sender: str
    recipient: str
    purpose: str
    trace_id: str
    state: str
    attempt: int
    created_ms: int
    updated_ms: int
    deadline_ms: int
    code: str | None

    @property
    def open(self) -> bool:
        """Whether the request has not ended yet."""
        return self.state in OPEN_STATES

    def lasted_ms(self, now_ms: int) -> int:
        """From accept to its end (to ``now_ms`` while it is open)."""
        end = now_ms if self.open else self.updated_ms
        return max(0, end - self.created_ms)

    @classmethod
    def from_values(cls, message_id: str, raw: Sequence[Any]) -> RequestRecord | None:
        """The record of ``message_id`` from an HMGET of :data:`RECORD_FIELDS`; ``None``
        when it is gone (expired or evicted)."""
        v = dict(zip(RECORD_FIELDS, (_text(value) for value in raw), strict=True))
        if not v["state"]:
            return None
        return cls(id=message_id, parent=v["parent"] or None, sender=_address(v["from"]),
                   recipient=_address(v["to"]), purpose=v["purpose"], trace_id=v["trace"],
                   state=v["state"], attempt=int(v["attempts"] or 0),
                   created_ms=int(v["created"] or 0),
                   updated_ms=int(v["updated"] or v["created"] or 0),
                   deadline_ms=int(v["deadline"] or 0), code=v["code"] or None)


async def read_records(redis: Redis, namespace: str,
                       ids: Sequence[str]) -> dict[str, RequestRecord]:
    """The records of ``ids`` that still exist, in one pipeline.

    Raises:
        StoreUnavailable: Redis failed.
    """
    if not ids:
        return {}
    k = Keys(namespace)
    pipe = redis.pipeline(transaction=False)
    for mid in ids:
        pipe.hmget(k.message(mid), list(RECORD_FIELDS))
    try:
        rows = await pipe.execute()
    except STORE_ERRORS as exc:
        raise store_unavailable("records", exc) from exc
    found = {}
    for mid, raw in zip(ids, rows, strict=True):
        record = RequestRecord.from_values(mid, raw)
        if record is not None:
            found[mid] = record
    return found


async def trace_ids(redis: Redis, namespace: str, trace_id: str) -> list[str]:
    """Every request id of the trace, in accept order.

    Raises:
        StoreUnavailable: Redis failed.
    """
    try:
        raw = await redis.zrange(Keys(namespace).trace(trace_id), 0, -1)
    except STORE_ERRORS as exc:
        raise store_unavailable("trace", exc) from exc
    return [_text(mid) for mid in raw]


async def read_trace(redis: Redis, namespace: str, trace_id: str) -> list[RequestRecord]:
    """The kept records of every request of the trace, in accept order (two round trips).

    Raises:
        StoreUnavailable: Redis failed.
    """
    ids = await trace_ids(redis, namespace, trace_id)
    records = await read_records(redis, namespace, ids)
    return [records[mid] for mid in ids if mid in records]


def _open_descendants(records: Sequence[RequestRecord], root: str) -> list[str]:
    children: dict[str, list[RequestRecord]] = {}
    for record in records:
        if record.parent is not None:
            children.setdefault(record.parent, []).append(record)
    found, queue, seen = list[str](), [root], {root}
    while queue:
        for child in children.get(queue.pop(), []):
            if child.id not in seen:
                seen.add(child.id)
                queue.append(child.id)
                if child.open:
                    found.append(child.id)
    return found


async def cascade_cancel(redis: Redis, namespace: str, root_id: str, *,
                         retention_ms: int = RETENTION_S * 1000,
                         settled_maxlen: int = SETTLED_MAXLEN, audit_maxlen: int = AUDIT_MAXLEN,
                         now: str = "", at: str | None = None) -> list[str]:
    """Cancel every open descendant of the ended request ``root_id`` (reason
    :data:`CASCADE_CODE`, audited ``request.cancelled`` with ``cascadeRoot``); returns
    the ids cancelled. Nothing happens while ``root_id`` is open or unknown.

    A request whose turn never ran made no request: one HMGET and done. Otherwise it
    reads the trace (the index, then one pipeline of its records: the cost grows with
    the trace, which its hop budget bounds) and runs the script only when an open
    descendant exists; the script re-reads the tree atomically. ``now``/``at`` replace
    the server clock (tests).

    Raises:
        StoreUnavailable: Redis failed.
    """
    k, scripts = Keys(namespace), Scripts(redis)
    try:
        raw_trace, attempts = await redis.hmget(  # type: ignore[misc]
            k.message(root_id), ["trace", "attempts"])
    except STORE_ERRORS as exc:
        raise store_unavailable("cascade", exc) from exc
    trace = _text(raw_trace)
    if not trace or _text(attempts) in ("", "0"):
        return []  # no turn of it ever ran, so it made no request: nothing to read
    for _ in range(_RETRIES):
        ids = await trace_ids(redis, namespace, trace)
        records = await read_records(redis, namespace, ids)
        if not _open_descendants([records[i] for i in ids if i in records], root_id):
            return []
        named = {"root": root_id, "ids": ids, "events": [new_id() for _ in ids],
                 "code": CASCADE_CODE, "now": now, "at": at or format_timestamp(),
                 "retention": retention_ms, "settled_maxlen": settled_maxlen,
                 "audit_maxlen": audit_maxlen}
        raw = await scripts.call(
            "cascade_cancel",
            [k.message(root_id), k.trace(trace), k.open, k.leases, k.settled, k.audit,
             *(k.message(mid) for mid in ids)], [json.dumps(named)])
        outcome = _text(raw[0])
        if outcome == "cascaded":
            return [_text(mid) for mid in raw[1:]]
        if outcome != "trace_changed":
            return []
    return []
