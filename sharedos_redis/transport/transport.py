"""RedisStreamTransport: the kernel's MessageTransport on Redis Streams.

Owns the accept path. ``deliver`` makes one round trip: the ``accept_request``
script refuses a duplicate id, spends one hop of the trace budget, writes the
pending marker (``keys.MARKER_FIELDS``), indexes it by deadline, appends the
outbox entry and the ``message.accepted`` audit record — all or nothing. The
outbox relay (``relay.py``) then wakes the recipient; ``on_accepted`` is an
optional fast path whose failure the relay makes harmless.

Exact use accounting (ADR 0029): when the request carries a reserved ``maxUses``
use (``kernel.usage.reserved_use``), a refusal before admission gives it back
with a ``grant.usage.released`` record in the same script (duplicate, budget,
fence, replay conflict, route) or in ``release_grant_use`` (payload too large); an
accepted request commits it.

Nested requests (issue 12): inside a turn (``turn_scope.current_turn``) the accept
carries the parent request, the call's fingerprint and the turn's attempt. The
script refuses a stale attempt (``turn_lease_lost``) and lets a re-run turn's same
call re-attach to the request its earlier attempt started (``attached``: no second
accept, hop or use; the receipt says ``replayed``), or refuses a changed call
(``replay_conflict``).

Route lease (ADR 0025): with ``route_check`` the accept script also refuses a
recipient that is no agent (``route_not_agent``) or an agent no live worker serves
(``route_unavailable``, ``store.directory``), before any hop is spent and with the use
given back. The kernel authorized the send first, so a model only ever meets a route
code for a recipient its grants reach (else ``no_matching_grant``).

Must not import router/ or worker/.
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from functools import lru_cache
from typing import Final, Protocol, cast

import anyio
from pydantic import BaseModel, ConfigDict, Field
from redis.asyncio import Redis

from ..errors import AuditUnavailable, StoreUnavailable
from ..faults import fault_point
from ..kernel.audit import audit_event
from ..kernel.contracts import (
    AccessContext,
    AuditEvent,
    DeliveryAccepted,
    DeliveryDenied,
    DeliveryFailed,
    MessageDeliveryResult,
    MessageEnvelope,
    ProtocolError,
    format_timestamp,
)
from ..kernel.outbox import effect_audit
from ..kernel.reasons import REASON_CODES, ReasonCode
from ..kernel.usage import UseReservation, reserved_use
from ..observability import telemetry
from ..store.audit import RedisAuditSink, audit_fields, compact_records
from ..store.keys import Keys, address_tag
from ..store.limits import (
    AUDIT_MAXLEN,
    BUDGET_TTL_S,
    DEFAULT_HOPS,
    MAX_PAYLOAD_BYTES,
    REQUEST_TIMEOUT_S,
    RETENTION_S,
    ROUTE_CHECK,
)
from ..store.markers import payload_bytes
from ..store.scripts import Scripts
from .deadlines import turn_deadline_ms
from .turn_scope import current_turn

__all__ = ["AcceptHook", "RedisStreamTransport", "ReplyWatch", "TransportSettings"]

_log = logging.getLogger(__name__)

AcceptHook = Callable[[str, str], Awaitable[None]]
"""``(namespace, message_id)``, called after a successful accept (must be idempotent)."""



class ReplyWatch(Protocol):
    """Arms the reply waiter of a request before its accept (the router implements it)."""

    def expect(self, namespace: str, message_id: str) -> bool:
        """Arm the waiter (synchronously); True when armed."""

    def unexpect(self, namespace: str, message_id: str) -> None:
        """Disarm it: the request was not accepted."""


_REFUSALS: Final[dict[str, str]] = {
    "duplicate_message": "a message with this id was already accepted",
    "budget_exhausted": "the trace has no hops left",
    "turn_lease_lost": "another attempt holds the requesting turn",
    "replay_conflict": "the re-issued call differs from the one this turn made before",
    "route_unavailable": "no live worker serves the recipient",
    "route_not_agent": "the recipient is not an agent",
}
"""The accept script's refusal codes and what the denied receipt says of them."""


class TransportSettings(BaseModel):
    """Limits and lifetimes of the accept path."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    request_timeout_s: float = Field(default=REQUEST_TIMEOUT_S, gt=0)
    default_budget_hops: int = Field(default=DEFAULT_HOPS, ge=0)
    max_payload_bytes: int = Field(default=MAX_PAYLOAD_BYTES, gt=0)
    retention_s: int = Field(default=RETENTION_S, gt=0)
    budget_ttl_s: int = Field(default=BUDGET_TTL_S, gt=0)
    audit_maxlen: int = Field(default=AUDIT_MAXLEN, gt=0)
    accept_timeout_s: float = Field(default=10.0, gt=0)
    route_check: bool = ROUTE_CHECK
    """Refuse a request to a non-agent address or an agent no live worker serves (the
    agent directory, ``store.directory``), atomically with the accept."""


def _error(code: ReasonCode, message: str, *, retryable: bool | None = None) -> ProtocolError:
    return ProtocolError(code=code, message=message, retryable=retryable)


def _released_event(context: AccessContext, envelope: MessageEnvelope, now: datetime,
                    reservation: UseReservation, code: str) -> AuditEvent:
    return audit_event(context, "grant.usage.released", "succeeded", at=format_timestamp(now),
                       grant_id=reservation.grant_id, operation_id=envelope.id,
                       message_id=envelope.id, reason=code, metadata={"usageState": "released"})


def call_fingerprint(envelope: MessageEnvelope) -> str:
    """The replay fingerprint of a request: SHA-256 over canonical JSON (sorted keys) of
    what makes it the same call — sender, receiver, purpose, trace and payload; the id
    and ``createdAt`` (an observation time) are left out (ADR 0028)."""
    call = {"sender": envelope.sender.to_wire(), "receiver": envelope.receiver.to_wire(),
            "purpose": envelope.purpose, "traceId": envelope.trace_id,
            "payload": envelope.payload}
    canonical = json.dumps(call, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()


def _turn_fields() -> dict[str, str | int]:
    """The receipt's fencing fields of a nested request: the parent request and the
    attempt that made it (the router cancels it on that attempt's behalf only while the
    attempt still holds the parent's turn); none outside a turn."""
    scope = current_turn.get()
    return {} if scope is None else {"parent": scope.request_id, "attempt": scope.attempt}


@lru_cache(maxsize=256)
def _keys(namespace: str) -> Keys:
    """The namespace's keys, built once (every accept names nine of them)."""
    return Keys(namespace)


def _text(value: object) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _now_ms(moment: datetime) -> int:
    return int(moment.timestamp() * 1000)


class RedisStreamTransport:
    """Durably accepts already-authorized envelopes into a namespace's outbox.

    It writes the decision's before-effect records (``kernel.outbox``) inside the
    accept script, atomically with the accept or its refusal.

    Args:
        redis: the client (build it with ``store.client.create_redis`` so socket
            operations are bounded).
        settings: limits and lifetimes.
        on_accepted: optional fast-path wake-up ``(namespace, message_id)``.
        clock: the current time (UTC); tests pin it.
        watch: arms the reply waiter before the accept script runs, so the waiter
            needs no durable read before it waits (``RedisRequestRouter``).
    """

    writes_effect_audit: Final = True
    """The accept script appends the open ``EffectAudit`` records (kernel.outbox)."""

    def __init__(
        self,
        redis: Redis,
        *,
        settings: TransportSettings = TransportSettings(),  # noqa: B008 - frozen, never mutated
        on_accepted: AcceptHook | None = None,
        clock: Callable[[], datetime] | None = None,
        watch: ReplyWatch | None = None,
    ) -> None:
        self._redis = redis
        self.watch = watch
        self._scripts = Scripts(redis)
        self._settings = settings
        self._on_accepted = on_accepted
        self._clock = clock or (lambda: datetime.now(UTC))
        self._audit = RedisAuditSink(redis, maxlen=settings.audit_maxlen)

    @property
    def settings(self) -> TransportSettings:
        """The transport's settings."""
        return self._settings

    async def deliver(
        self, context: AccessContext, envelope: MessageEnvelope
    ) -> MessageDeliveryResult:
        """Accept ``envelope`` durably (one Redis round trip).

        Returns:
            ``accepted`` (metadata: ``deadlineMs``, ``hopsLeft``; for a re-attached
            nested request ``deadlineMs`` is the stored one and ``replayed`` is true;
            inside a turn also ``parent`` and ``attempt``, the router's fence);
            ``denied`` with ``payload_too_large``, ``duplicate_message``,
            ``budget_exhausted``, ``turn_lease_lost``, ``replay_conflict``,
            ``route_not_agent`` or ``route_unavailable`` (nothing written); ``failed``
            with ``message_delivery_failed`` when Redis failed or did not answer within
            ``accept_timeout_s``.
        """
        now = self._clock()
        stamp = format_timestamp(now)
        limit = self._settings.max_payload_bytes
        if payload_bytes(envelope.payload) > limit:
            await self._write_effect_audit()  # the decision's record before the release
            await self._release(context, envelope, now)
            return DeliveryDenied(message_id=envelope.id, timestamp=stamp,
                                  error=_error("payload_too_large",
                                               f"the payload exceeds {limit} bytes"))
        deadline = self._deadline_ms(now)
        reservation = reserved_use.get()
        armed = self.watch is not None and self.watch.expect(context.namespace_id, envelope.id)
        try:
            with anyio.fail_after(self._settings.accept_timeout_s):
                status, value = await self._accept(context, envelope, now, deadline,
                                                   reservation)
        except BaseException as exc:
            self._disarm(armed, context.namespace_id, envelope.id)
            if not isinstance(exc, StoreUnavailable | TimeoutError):
                raise
            _log.warning("accept of %s failed: %s", envelope.id, type(exc).__name__)
            return DeliveryFailed(message_id=envelope.id, timestamp=stamp,
                                  error=_error("message_delivery_failed",
                                               "the message store is unavailable", retryable=True))
        if status != "accepted" and reservation is not None:
            reservation.released = True  # by the script, with its record
        if status == "attached":  # the waiter stays armed; its settlement may be past
            return DeliveryAccepted(message_id=envelope.id, timestamp=stamp, metadata={
                "deadlineMs": value, "replayed": True, **_turn_fields()})
        if status != "accepted":
            self._disarm(armed, context.namespace_id, envelope.id)
            return self._refuse(envelope, status, stamp)
        fault_point("accept.after")
        await self._wake(context.namespace_id, envelope.id)
        return DeliveryAccepted(message_id=envelope.id, timestamp=stamp, metadata={
            "deadlineMs": deadline, "hopsLeft": value, **_turn_fields()})

    def _disarm(self, armed: bool, namespace: str, message_id: str) -> None:
        if armed and self.watch is not None:
            self.watch.unexpect(namespace, message_id)

    def _deadline_ms(self, now: datetime) -> int:
        deadline = _now_ms(now) + int(self._settings.request_timeout_s * 1000)
        cap = turn_deadline_ms.get()
        return deadline if cap is None else min(deadline, cap)

    async def _accept(
        self, context: AccessContext, envelope: MessageEnvelope, now: datetime, deadline: int,
        reservation: UseReservation | None,
    ) -> tuple[str, int]:
        """Run the accept script: (status, hops left | the stored deadline if attached)."""
        keys = _keys(context.namespace_id)
        event = audit_event(context, "message.accepted", "succeeded", at=format_timestamp(now),
                            message_id=envelope.id, receiver=envelope.receiver)
        released = [] if reservation is None else [_released_event(
            context, envelope, now, reservation, "duplicate_message",
        )]  # the script sets the reason to its refusal's code
        s, hooks = self._settings, telemetry()
        outbox = effect_audit.get()
        scope = current_turn.get()
        decided = list(outbox.events) if outbox is not None else []
        if_accepted = list(outbox.on_accept) if outbox is not None else []
        # one audit entry: every record compacted against the accepted record's attribution
        head, records = compact_records([event, *released, *decided, *if_accepted])
        accepted_record, records = records[0], records[1:]
        released_record = records.pop(0) if released else ""
        named = {
            "id": envelope.id, "from": address_tag(envelope.sender.kind, envelope.sender.id),
            "to": address_tag(envelope.receiver.kind, envelope.receiver.id),
            "purpose": envelope.purpose, "trace": envelope.trace_id, "now": str(_now_ms(now)),
            "deadline": str(deadline), "retention": str(s.retention_s * 1000),
            "hops": str(s.default_budget_hops), "budget_ttl": str(s.budget_ttl_s * 1000),
            "maxlen": str(s.audit_maxlen),
            # the requester's span (not the accept span) parents the recipient's turn
            "tp": hooks.traceparent() or "",
            "grant": reservation.grant_id if reservation is not None else "",
            "parent": scope.request_id if scope is not None else "",
            "fp": call_fingerprint(envelope),
            "attempt": str(scope.attempt) if scope is not None else "",
            "route": "1" if s.route_check else "",
            "h": head,
        }
        parent_key = keys.message(scope.request_id) if scope is not None else keys.message(
            envelope.id)
        with hooks.accept_span(context, envelope):
            result = await self._scripts.call_named(
                "accept_request",
                [keys.message(envelope.id), keys.budget(envelope.trace_id), keys.open,
                 keys.outbox, keys.audit, keys.usage, keys.trace(envelope.trace_id),
                 parent_key, keys.agents],
                *records, **named, env=envelope.to_json(), ctx=context.to_json(),
                accepted=accepted_record, released=released_record, decided=str(len(decided)),
            )
        status, value = _text(result[0]), int(result[1])
        if outbox is not None:  # written by the script, atomically with it
            del outbox.events[:len(decided)]
            outbox.on_accept_written = bool(if_accepted) and status in ("accepted", "attached")
            outbox.on_accept.clear()
        return status, value

    async def _write_effect_audit(self) -> None:
        """Write the open outbox's records now (no accept script runs for this request)."""
        outbox = effect_audit.get()
        while outbox is not None and outbox.events:
            try:
                await self._audit.record(outbox.events[0])
            except AuditUnavailable as exc:  # the kernel tries again after the refusal
                _log.warning("decision record not written: %s", exc)
                return
            del outbox.events[0]

    async def _release(self, context: AccessContext, envelope: MessageEnvelope,
                       now: datetime) -> None:
        """Give back the request's reserved use (refused before the script), with its record."""
        reservation = reserved_use.get()
        if reservation is None:
            return
        keys = _keys(context.namespace_id)
        event = _released_event(context, envelope, now, reservation, "payload_too_large")
        try:
            await self._scripts.call("release_grant_use", [keys.usage, keys.audit],
                                     [reservation.grant_id, self._settings.audit_maxlen,
                                      *audit_fields(event)])
        except StoreUnavailable as exc:  # the kernel tries once more through its usage port
            _log.warning("release of a use of %s failed: %s", reservation.grant_id,
                         type(exc).__name__)
            return
        reservation.released = True

    @staticmethod
    def _refuse(envelope: MessageEnvelope, status: str, stamp: str) -> DeliveryDenied:
        """The receipt of a refusal (the script audited it as ``message.refused``)."""
        code = cast(ReasonCode, status if status in REASON_CODES else "message_delivery_failed")
        return DeliveryDenied(message_id=envelope.id, timestamp=stamp,
                              error=_error(code, _REFUSALS.get(status, "refused")))

    async def _wake(self, namespace: str, message_id: str) -> None:
        if self._on_accepted is None:
            return
        try:
            await self._on_accepted(namespace, message_id)
        except Exception:  # the relay retries the wake-up from the durable outbox
            _log.warning("fast-path wake-up of %s failed", message_id, exc_info=True)
