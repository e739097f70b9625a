"""The pending marker's state machine after dispatch, one atomic script per transition.

``accepted → dispatched → running → replied | failed | timed_out | cancelled | dead``.
Terminal states never change, with one sanctioned exception: :meth:`MarkerStore.redrive`,
a human re-drive of a dead letter (``dead → accepted``). Every settlement appends one
entry ``{id, state[, result]}`` to ``Keys.settled`` (the reply listener wakes its
waiter from it; ``result`` is a failure code, a reply is stored only in the marker)
and one audit record to ``Keys.audit`` in the same script. Time inside the scripts
is the Redis server's ``TIME`` so every process agrees on deadlines and leases (a
``clock_ms`` can replace it in tests). A turn's own settlement carries its attempt as a
fencing token: refused (``turn_lease_lost``, audited) inside the script unless that
attempt still runs the request. Owns no key format (``keys.py`` does); imports no arq.

Index hygiene: every index read here and every transition that finds a record gone
(expired or evicted while open) hands its id to :meth:`MarkerStore.forget`, so no id
outlives its record in the open and leases indexes.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Literal, TypeVar

from redis.asyncio import Redis

from ..kernel.contracts import (
    AuditEvent,
    MessageEnvelope,
    format_timestamp,
    service,
)
from ..kernel.ids import new_id
from .audit import RedisAuditSink, audit_fields, compact_records
from .boundary import STORE_ERRORS, store_unavailable
from .keys import OPEN_STATES, RELAY_GROUP, Keys, address_tag
from .limits import (
    AUDIT_MAXLEN,
    BUDGET_TTL_S,
    DEAD_MAXLEN,
    DEFAULT_HOPS,
    MAX_PAYLOAD_BYTES,
    RETENTION_S,
    SETTLED_MAXLEN,
)
from .scripts import Scripts
from .tree import cascade_cancel

__all__ = ["EXPIRED_CODE", "HOST_ADDRESS", "ClaimOutcome", "FailureState", "MarkerStore",
           "OpenScan", "RedriveStatus", "Settlement", "TurnClaim", "payload_bytes"]

ClaimOutcome = Literal["claimed", "busy", "closed", "missing", "dead"]
FailureState = Literal["failed", "timed_out", "cancelled", "dead"]
RedriveStatus = Literal["redriven", "closed", "budget_exhausted"]
HOST_ADDRESS = service("sharedos-redis")
"""Actor, authority and owner of host records that no stored request context covers."""

EXPIRED_CODE = "request_expired"
"""Reason of a request whose record vanished while open (dead letter and waiter outcome)."""

log = logging.getLogger("sharedos_redis.worker")  # index hygiene is the worker's concern
_T = TypeVar("_T")
_SCAN_CHUNK = 500


@dataclass(frozen=True)
class TurnClaim:
    """The answer of :meth:`MarkerStore.claim_turn`.

    ``outcome``: ``claimed`` (run the turn), ``busy`` (another live lease), ``closed``
    (terminal), ``missing`` (no such request) or ``dead`` (max attempts reached, now
    dead-lettered). ``request`` is set only when claimed, and ``traceparent`` when
    claimed and the requester was traced. The requester's stored context stays in
    Redis: a turn runs under the recipient's own identity and never reads it.
    """

    outcome: ClaimOutcome
    attempt: int
    request: MessageEnvelope | None
    deadline_ms: int
    traceparent: str | None = None


@dataclass(frozen=True)
class Settlement:
    """The answer of a settlement: ``code`` is ``settled`` or the refusal's reason code."""

    settled: bool
    code: str
    state: str | None
    cause: str | None = None


@dataclass(frozen=True)
class OpenScan:
    """One bounded slice of the open index (:meth:`MarkerStore.scan_open`).

    ``stale``: ids stuck in a state longer than its cutoff; ``next_start``: the rank
    the next slice starts at (``None`` once the end of the index was reached);
    ``orphans``: open id → its parent's id, for parents that ended or whose record is
    gone (the cascade missed them: a process died between the two steps).
    """

    stale: list[str]
    next_start: int | None
    orphans: dict[str, str] = field(default_factory=dict)


def payload_bytes(payload: object) -> int:
    """The size of a payload as compact UTF-8 JSON (what request and reply limits measure)."""
    return len(json.dumps(payload, ensure_ascii=False, separators=(",", ":")).encode("utf-8"))


def _text(value: object) -> str:
    if isinstance(value, bytes):
        return value.decode()
    return "" if value is None else str(value)


def _token(attempt: int | None) -> str:
    """A fencing token as a script argument ("" = unfenced)."""
    return "" if attempt is None else str(attempt)


def _attribution(namespace: str, actor: object, purpose: str, trace_id: str) -> str:
    """Who a settlement record names when the request's stored context is unreadable."""
    return json.dumps({"namespaceId": namespace, "actor": actor,
                       "authority": HOST_ADDRESS.to_wire(), "owner": HOST_ADDRESS.to_wire(),
                       "purpose": purpose, "traceId": trace_id})


def _settlement(raw: list[Any]) -> Settlement:
    return Settlement(settled=int(raw[0]) == 1, code=_text(raw[1]),
                      state=_text(raw[2]) or None, cause=_text(raw[3]) or None)


class MarkerStore:
    """Atomic transitions of the pending markers of any namespace.

    Args:
        redis: the client (``decode_responses=False``).
        retention_s: how long a terminal marker is kept (PEXPIRE).
        audit_maxlen / settled_maxlen / dead_maxlen: ``MAXLEN ~`` of those streams.
        max_reply_bytes: the largest reply payload (UTF-8 JSON) that is stored; a larger
            one fails the request ``reply_too_large`` instead (nothing of it is stored).
        clock_ms: replaces the Redis server's clock (tests only).
        audit: the process's audit sink: a settlement script appends the records it has
            queued for the namespace ahead of its own (one round trip less).
    """

    def __init__(self, redis: Redis, *, retention_s: int = RETENTION_S,
                 audit_maxlen: int = AUDIT_MAXLEN, settled_maxlen: int = SETTLED_MAXLEN,
                 dead_maxlen: int = DEAD_MAXLEN, max_reply_bytes: int = MAX_PAYLOAD_BYTES,
                 clock_ms: Callable[[], int] | None = None,
                 audit: RedisAuditSink | None = None) -> None:
        self.max_reply_bytes = max_reply_bytes
        self._audit = audit
        self._redis = redis
        self._scripts = Scripts(redis)
        self._retention_ms = retention_s * 1000
        self._audit_maxlen, self._settled_maxlen = audit_maxlen, settled_maxlen
        self._dead_maxlen = dead_maxlen
        self._clock_ms = clock_ms

    def _now_arg(self) -> str:
        return "" if self._clock_ms is None else str(self._clock_ms())

    def _at(self) -> str:
        moment = None if self._clock_ms is None else datetime.fromtimestamp(
            self._clock_ms() / 1000, UTC)
        return format_timestamp(moment)

    async def _io(self, operation: str, call: Awaitable[_T]) -> _T:
        try:
            return await call
        except STORE_ERRORS as exc:
            raise store_unavailable(operation, exc) from exc

    async def _now_ms(self, namespace: str) -> int:
        if self._clock_ms is not None:
            return self._clock_ms()
        return await self._scripts.now_ms(Keys(namespace).open)

    async def claim_turn(self, namespace: str, message_id: str, *, lease_ms: int,
                         max_attempts: int, worker: str, relayed: str | None = None
                         ) -> TurnClaim:
        """Take the turn lease: ``accepted|dispatched`` or an expired ``running`` → ``running``.

        ``relayed``: the outbox entry the relay handed over with the turn; the claim
        retires it (and audits ``message.dispatched``) in the same script, in place of
        the relay's ``dispatch_request``.

        Returns:
            The claim; ``attempt`` is the attempt number the turn runs as.

        Raises:
            StoreUnavailable: Redis failed.
            ContractError: the stored envelope is corrupt.
        """
        k = Keys(namespace)
        raw = await self._scripts.call_named(
            "claim_turn",
            [k.message(message_id), k.leases, k.open, k.settled, k.audit, k.dead, k.outbox],
            id=message_id, lease=lease_ms, max_attempts=max_attempts, worker=worker,
            now=self._now_arg(), retention=self._retention_ms,
            settled_maxlen=self._settled_maxlen, audit_maxlen=self._audit_maxlen,
            dead_maxlen=self._dead_maxlen, event=new_id(), at=self._at(), group=RELAY_GROUP,
            entry=relayed or "", dispatched=new_id() if relayed else "")
        outcome, attempt, env = _text(raw[0]), int(raw[1]), raw[2]
        claimed = outcome == "claimed"
        if outcome == "missing":
            await self.forget(namespace, [message_id])
        return TurnClaim(
            outcome=outcome,  # type: ignore[arg-type]  # the script returns only ClaimOutcome
            attempt=attempt,
            request=MessageEnvelope.from_json(env) if claimed else None,
            deadline_ms=int(raw[3]),
            traceparent=(_text(raw[4]) or None) if claimed and len(raw) > 4 else None)

    async def renew_lease(self, namespace: str, message_id: str, *, lease_ms: int,
                          attempt: int) -> bool:
        """Extend the lease of ``attempt``; False when that attempt no longer holds it.

        Raises:
            StoreUnavailable: Redis failed.
        """
        k = Keys(namespace)
        raw = await self._scripts.call("renew_lease", [k.message(message_id), k.leases],
                                       [message_id, lease_ms, attempt, self._now_arg()])
        if int(raw) == -1:
            await self.forget(namespace, [message_id])
        return int(raw) == 1

    async def release_turn(self, namespace: str, message_id: str, *, attempt: int) -> bool:
        """Hand a running turn back (``running`` → ``dispatched``, lease dropped) so another
        worker re-runs it at once; only ``attempt``, the lease holder, may. A draining
        worker does this for turns that may safely run again.

        Raises:
            StoreUnavailable: Redis failed.
        """
        k = Keys(namespace)
        raw = await self._scripts.call("release_turn", [k.message(message_id), k.leases],
                                       [message_id, attempt, await self._now_ms(namespace)])
        return int(raw) == 1

    async def settle_reply(self, namespace: str, reply: MessageEnvelope, *,
                           attempt: int | None = None) -> Settlement:
        """Settle the request named by ``reply.replyTo`` with ``reply`` (open → replied).

        Refusals (audited as ``reply.refused``, nothing else changes):
        ``unknown_request``; ``turn_lease_lost`` (``attempt`` given and the request is
        not running under it: cause ``attempt`` when another attempt claimed it since,
        else the state it left ``running`` for); ``request_closed``
        (cause = the terminal state); ``reply_mismatch`` (cause ``reply_to`` |
        ``sender`` | ``receiver`` | ``purpose`` | ``trace_id``). A payload over
        ``max_reply_bytes`` is not stored: the open request fails ``reply_too_large``
        (what its requester is told; fenced by ``attempt`` too).

        Args:
            attempt: the settling turn's attempt (its fencing token); None settles
                whoever runs the request (a router cancel, the reconciler).

        Raises:
            StoreUnavailable: Redis failed.
        """
        if reply.reply_to is None:
            await self.audit_refusal(namespace, code="reply_mismatch", cause="reply_to",
                                     trace_id=reply.trace_id)
            return Settlement(False, "reply_mismatch", None, "reply_to")
        k, mid = Keys(namespace), reply.reply_to
        if payload_bytes(reply.payload) > self.max_reply_bytes:
            failed = await self.settle_failure(namespace, mid, state="failed",
                                               code="reply_too_large", attempt=attempt)
            return Settlement(False, "reply_too_large" if failed.settled else failed.code,
                              failed.state, failed.cause)
        attribution = _attribution(namespace, reply.sender.to_wire(), reply.purpose,
                                   reply.trace_id)
        raw = await self._carrying(namespace, lambda queued: self._scripts.call_named(
            "settle_reply", [k.message(mid), k.open, k.leases, k.settled, k.audit], *queued,
            id=mid, reply=reply.to_json(),
            sender=address_tag(reply.sender.kind, reply.sender.id),
            receiver=address_tag(reply.receiver.kind, reply.receiver.id),
            purpose=reply.purpose, trace=reply.trace_id, now=self._now_arg(),
            retention=self._retention_ms, settled_maxlen=self._settled_maxlen,
            audit_maxlen=self._audit_maxlen, event=new_id(), at=self._at(),
            fallback=attribution, attempt=_token(attempt)))
        return await self._forget_unknown(namespace, mid, _settlement(raw))

    async def settle_failure(self, namespace: str, message_id: str, *, state: FailureState,
                             code: str, attempt: int | None = None) -> Settlement:
        """End an open request without a reply (open → ``state``, storing ``code``).

        Refusals (nothing changes): ``unknown_request``, ``request_closed``; with
        ``attempt`` (the settling turn's fencing token) also ``turn_lease_lost`` when the
        request is not running under it, audited as ``reply.refused``.

        Raises:
            StoreUnavailable: Redis failed.
        """
        k = Keys(namespace)
        attribution = _attribution(namespace, HOST_ADDRESS.to_wire(), "request settlement",
                                   "untraced")
        raw = await self._carrying(namespace, lambda queued: self._scripts.call_named(
            "settle_failure",
            [k.message(message_id), k.open, k.leases, k.settled, k.audit, k.dead], *queued,
            id=message_id, state=state, code=code, now=self._now_arg(),
            retention=self._retention_ms, settled_maxlen=self._settled_maxlen,
            audit_maxlen=self._audit_maxlen, dead_maxlen=self._dead_maxlen, event=new_id(),
            at=self._at(), attempt=_token(attempt), fallback=attribution))
        return await self._forget_unknown(namespace, message_id, _settlement(raw))

    async def holds_lease(self, namespace: str, message_id: str, attempt: int) -> bool:
        """Whether ``attempt`` still runs the request (state ``running``, ``attempts ==
        attempt``): the fence a turn's host tool calls pass before their handler runs.

        Raises:
            StoreUnavailable: Redis failed.
        """
        state, attempts = await self.fields(namespace, message_id, ("state", "attempts"))
        return state == "running" and attempts == str(attempt)

    async def _carrying(self, namespace: str,
                        script: Callable[[list[str]], Awaitable[Any]]) -> Any:
        """Run a settlement ``script`` carrying the namespace's queued audit records (its
        last arguments: their header, then the records compacted against it; see
        store/audit.py); they are queued again if it fails."""
        queued = self._audit.take_queued(namespace) if self._audit is not None else []
        try:
            head, records = compact_records(queued)
            return await script([head, *records])
        except BaseException:
            if self._audit is not None:
                self._audit.give_back(queued)
            raise

    async def _forget_unknown(self, namespace: str, message_id: str,
                              settlement: Settlement) -> Settlement:
        if settlement.code == "unknown_request":
            await self.forget(namespace, [message_id])
        return settlement

    async def forget(self, namespace: str, message_ids: Sequence[str]) -> list[str]:
        """Remove the ids whose record is gone from every index (script ``forget_missing``);
        each gets a dead letter and a settlement entry (``request_expired``: its waiter
        wakes) and a WARNING. Live or unindexed ids are left alone; returns those forgotten.

        Raises:
            StoreUnavailable: Redis failed.
        """
        if not message_ids:
            return []
        k = Keys(namespace)
        raw = await self._scripts.call(
            "forget_missing",
            [k.open, k.leases, k.settled, k.dead, *(k.message(mid) for mid in message_ids)],
            [EXPIRED_CODE, self._at(), self._settled_maxlen, self._dead_maxlen, *message_ids])
        forgotten = [_text(item) for item in raw]
        for mid in forgotten:
            log.warning("request record vanished while open: namespace=%s message=%s "
                        "reason=%s (removed from the indexes, dead-lettered)",
                        namespace, mid, EXPIRED_CODE)
        return forgotten

    async def _live(self, namespace: str, ids: list[str]) -> list[str]:
        """``ids`` whose record exists; the others are forgotten."""
        if not ids:
            return ids
        k = Keys(namespace)
        pipe = self._redis.pipeline(transaction=False)
        for mid in ids:
            pipe.exists(k.message(mid))
        found = await self._io("index", pipe.execute())
        missing = [mid for mid, there in zip(ids, found, strict=True) if not there]
        if missing:
            gone = set(await self.forget(namespace, missing))
            return [mid for mid in ids if mid not in gone]
        return ids

    async def audit_refusal(self, namespace: str, *, code: str, cause: str | None = None,
                            message_id: str | None = None, trace_id: str | None = None) -> None:
        """Record a ``reply.refused`` event for a reply no script could look at.

        Raises:
            StoreUnavailable: Redis failed.
        """
        event = AuditEvent(
            id=new_id(), type="reply.refused", outcome="denied", at=self._at(),
            trace_id=trace_id or "untraced", namespace_id=namespace, actor=HOST_ADDRESS,
            authority=HOST_ADDRESS, owner=HOST_ADDRESS, purpose="reply settlement",
            message_id=message_id, reason=code, cause=cause)
        fields = audit_fields(event)
        await self._io("audit", self._redis.xadd(
            Keys(namespace).audit, {fields[0]: fields[1]}, maxlen=self._audit_maxlen,
            approximate=True))

    async def overdue(self, namespace: str, *, limit: int = 100) -> list[str]:
        """Open request ids whose deadline passed (server clock), earliest first.

        Reads at most ``limit`` index entries; ids whose record is gone are forgotten
        (see :meth:`forget`) and not returned, so the result may be shorter.

        Raises:
            StoreUnavailable: Redis failed.
        """
        raw = await self._scripts.call("marker_due", [Keys(namespace).open],
                                       [self._now_arg(), limit])
        return await self._live(namespace, [_text(item) for item in raw])

    async def expired_leases(self, namespace: str, *, limit: int = 100) -> list[str]:
        """Running request ids whose lease passed (server clock), earliest first.

        Reads at most ``limit`` index entries; vanished records are forgotten, as in
        :meth:`overdue`.

        Raises:
            StoreUnavailable: Redis failed.
        """
        raw = await self._scripts.call("marker_due", [Keys(namespace).leases],
                                       [self._now_arg(), limit])
        return await self._live(namespace, [_text(item) for item in raw])

    async def scan_open(self, namespace: str, *, older_than_ms: Mapping[str, int],
                        start: int = 0, count: int = _SCAN_CHUNK) -> OpenScan:
        """Read ``count`` open-index entries from rank ``start`` and their markers.

        ``stale`` lists the ids whose state is a key of ``older_than_ms`` and whose last
        transition is older than its value; ids whose record is gone are forgotten.

        Raises:
            StoreUnavailable: Redis failed.
        """
        k = Keys(namespace)
        now = await self._now_ms(namespace)
        raw_ids = await self._io("scan", self._redis.zrange(k.open, start, start + count - 1))
        ids = [_text(raw_id) for raw_id in raw_ids]
        pipe = self._redis.pipeline(transaction=False)
        for mid in ids:
            pipe.hmget(k.message(mid), ["state", "updated", "parent"])
        rows = await self._io("scan", pipe.execute()) if ids else []
        stale, missing, parents = list[str](), list[str](), dict[str, str]()
        for mid, (raw_state, updated, parent) in zip(ids, rows, strict=True):
            state, age = _text(raw_state), now - int(updated or now)
            if not state:
                missing.append(mid)
                continue
            if state in older_than_ms and age >= older_than_ms[state]:
                stale.append(mid)
            if parent:
                parents[mid] = _text(parent)
        await self.forget(namespace, missing)
        next_start = start + count - len(missing) if len(ids) == count else None
        return OpenScan(stale=stale, next_start=next_start,
                        orphans=await self._orphans(namespace, parents))

    async def _orphans(self, namespace: str, parents: dict[str, str]) -> dict[str, str]:
        """The entries of ``parents`` (open id → parent id) whose parent ended or is gone."""
        if not parents:
            return {}
        k = Keys(namespace)
        pipe = self._redis.pipeline(transaction=False)
        for parent in parents.values():
            pipe.hget(k.message(parent), "state")
        states = await self._io("scan", pipe.execute())
        return {mid: parent for (mid, parent), state in zip(parents.items(), states, strict=True)
                if _text(state) not in OPEN_STATES}

    async def redrive(self, namespace: str, message_id: str, *, deadline_ms: int,
                      trace_id: str, default_hops: int = DEFAULT_HOPS,
                      budget_ttl_ms: int = BUDGET_TTL_S * 1000,
                      released: tuple[str, tuple[str, str]] | None = None) -> RedriveStatus:
        """Re-drive a dead letter: ``dead → accepted`` with attempts 0 and a new deadline.

        The one sanctioned exception to "terminal states never change" (a human
        decision). It spends one hop of the trace's budget like an accept; the request
        re-enters the open index and the outbox, audited as ``request.redriven``.
        ``released`` is the sender's reserved grant use (grant id, audit field/value):
        given back, with its record, when the budget refuses.

        Returns:
            ``redriven``; ``closed`` when the marker is gone or not dead;
            ``budget_exhausted`` when the trace has no hops left (nothing changed).

        Raises:
            StoreUnavailable: Redis failed.
        """
        k = Keys(namespace)
        grant_id, (field, value) = released or ("", ("", ""))
        raw = await self._scripts.call_named(
            "marker_redrive", [k.message(message_id), k.open, k.outbox, k.audit,
                               k.budget(trace_id), k.usage],
            id=message_id, deadline=deadline_ms, now=self._now_arg(),
            retention=self._retention_ms, audit_maxlen=self._audit_maxlen, event=new_id(),
            at=self._at(), hops=default_hops, budget_ttl=budget_ttl_ms, grant=grant_id,
            released_field=field, released_value=value)
        status = int(raw)
        if status == 1:
            return "redriven"
        return "budget_exhausted" if status == -1 else "closed"

    async def dead_letters(self, namespace: str, *, count: int = 100) -> list[dict[str, str]]:
        """The oldest ``count`` dead letters: ``{stream_id, id, reason, at}`` each.

        An entry stays after a re-drive; the marker's state tells whether it is still dead.

        Raises:
            StoreUnavailable: Redis failed.
        """
        entries = await self._io("dead_letters",
                                 self._redis.xrange(Keys(namespace).dead, "-", "+", count=count))
        return [{"stream_id": _text(entry_id),
                 **{_text(key): _text(value) for key, value in fields.items()}}
                for entry_id, fields in entries]

    async def cascade(self, namespace: str, message_id: str) -> list[str]:
        """Cancel the open descendants of the ended request ``message_id``; see
        :func:`~sharedos_redis.store.tree.cascade_cancel`. Returns the ids cancelled.

        Raises:
            StoreUnavailable: Redis failed.
        """
        return await cascade_cancel(
            self._redis, namespace, message_id, retention_ms=self._retention_ms,
            settled_maxlen=self._settled_maxlen, audit_maxlen=self._audit_maxlen,
            now=self._now_arg(), at=self._at())

    async def fields(self, namespace: str, message_id: str,
                     names: tuple[str, ...]) -> list[str | None]:
        """Read some marker fields (``None`` where absent).

        Raises:
            StoreUnavailable: Redis failed.
        """
        call = self._redis.hmget(Keys(namespace).message(message_id), list(names))
        raw: list[Any] = await self._io("read", call)  # type: ignore[arg-type]  # async client
        return [None if value is None else _text(value) for value in raw]
