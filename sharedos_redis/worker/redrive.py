"""Re-driving a dead letter re-authorizes its sender (``sharedos-redis dead-letters --retry``).

Owns :func:`redrive_request`. A dead letter is re-driven as if its sender sent it
again now: the sender's stored context (identity, authority, owner, purpose,
trace) is checked against the grant store for the recipient-scoped send
requirement (a ``maxUses`` use is reserved, live revocation applies), then the
marker script spends one hop of the trace budget. A refusal says why and
changes nothing; a budget refusal gives the reserved use back with its record.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from redis.asyncio import Redis

from ..errors import ContractError
from ..kernel.audit import audit_event
from ..kernel.authorizer import CapabilityAuthorizer
from ..kernel.contracts import AccessContext, MessageEnvelope, format_timestamp
from ..kernel.messaging import messaging_requirement
from ..store.audit import RedisAuditSink, audit_fields
from ..store.grants import RedisGrantStore
from ..store.markers import MarkerStore
from ..store.usage import RedisGrantUsageStore
from ..transport.transport import TransportSettings

__all__ = ["RedriveOutcome", "redrive_request"]


@dataclass(frozen=True)
class RedriveOutcome:
    """What a re-drive did: ``redriven``, or why not (``code``)."""

    redriven: bool
    code: str | None = None


async def redrive_request(redis: Redis, namespace: str, message_id: str, *, timeout_s: float,
                          settings: TransportSettings | None = None) -> RedriveOutcome:
    """Re-drive dead letter ``message_id`` after re-authorizing its sender.

    Returns:
        ``redriven``; else ``code``: ``not_dead_letter`` (gone or not dead),
        ``invalid_request`` (the stored request is unreadable), the authorizer's
        refusal (``no_matching_grant``, ``grant_exhausted``, ...) or ``budget_exhausted``.

    Raises:
        StoreUnavailable: Redis failed.
    """
    markers, s = MarkerStore(redis), settings or TransportSettings()
    state, env, ctx = await markers.fields(namespace, message_id, ("state", "env", "ctx"))
    if state != "dead" or env is None or ctx is None:
        return RedriveOutcome(False, "not_dead_letter")
    now = datetime.now(UTC)
    try:
        envelope = MessageEnvelope.from_json(env)
        stored = AccessContext.from_json(ctx).to_wire()
        sender = AccessContext.from_wire({**stored, "now": format_timestamp(now)})
        requirement = messaging_requirement(sender, envelope.receiver)
    except ContractError:
        return RedriveOutcome(False, "invalid_request")
    grants = RedisGrantStore(redis)
    authorizer = CapabilityAuthorizer(grants, RedisGrantUsageStore(redis), RedisAuditSink(redis),
                                      revocations=grants)
    decision = await authorizer.consume(sender, requirement, operation_id=message_id)
    if not decision.allowed:
        return RedriveOutcome(False, decision.reason_code)
    released = None
    if decision.metadata is not None and decision.matched_grant_id is not None:
        field, value = audit_fields(audit_event(
            sender, "grant.usage.released", "succeeded", at=format_timestamp(now),
            grant_id=decision.matched_grant_id, operation_id=message_id, message_id=message_id,
            reason="budget_exhausted", metadata={"usageState": "released"}))
        released = (decision.matched_grant_id, (field, value))
    status = await markers.redrive(
        namespace, message_id, deadline_ms=int((now + timedelta(seconds=timeout_s))
                                               .timestamp() * 1000),
        trace_id=envelope.trace_id, default_hops=s.default_budget_hops,
        budget_ttl_ms=s.budget_ttl_s * 1000, released=released)
    if status == "redriven":
        return RedriveOutcome(True)
    if status == "budget_exhausted":
        await RedisAuditSink(redis).record(audit_event(
            sender, "message.refused", "denied", at=format_timestamp(now),
            message_id=message_id, receiver=envelope.receiver, reason="budget_exhausted"))
        return RedriveOutcome(False, "budget_exhausted")
    return RedriveOutcome(False, "not_dead_letter")
