"""The capability authorizer: deny by default, one audited decision per question.

Owns :class:`CapabilityAuthorizer`, which implements SharedOS authorization
(SPEC §2, steps 1-7) over three host ports: a trusted :class:`GrantSource`, an
atomic :class:`GrantUsageStore` and an :class:`AuditSink`. The pure matching
rules live in ``matching.py``. Imports no I/O library.

Choices where the SPEC leaves room (documented deviations):

* **Delegated grants** (``parentGrantId`` set) are not verified yet (chains are
  [later]): such a grant is skipped. When nothing else allows the request and a
  skipped delegated grant would have covered it, the decision is
  ``delegation_chain_unverified`` (``grant_exhausted`` takes precedence).
* **Usage store** missing or failing for a matching ``maxUses`` grant stops the
  walk at once with ``usage_store_unavailable`` (fail closed), even if a later
  grant could have allowed the request.
* **Consume, then audit.** On ``consume`` the use is spent first, because the
  audit record must state whether a use was spent (``consumed``). If the record
  then cannot be written the decision is ``audit_unavailable`` and the effect
  must not happen; the spent use is **not** refunded (fail closed: a lost use
  is safe, a refund would race with other consumers).
* **Unauditable decisions.** A context so malformed that no valid audit record
  can be attributed to it (e.g. an empty purpose) is denied ``invalid_context``
  without a record; an *allowed* decision is never returned unaudited.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any

from .audit import audit_event
from .contracts import (
    AccessContext,
    AuditEvent,
    AuditOutcome,
    AuthorizationDecision,
    CapabilityGrant,
    CapabilityRequirement,
    format_timestamp,
)
from .matching import (
    capability_reaches,
    checked_context,
    checked_grants,
    checked_requirement,
    covering_capability,
    grant_active,
    purpose_allowed,
)
from .ports import AuditSink, GrantSource, GrantUsageStore
from .reasons import AuthorizationReason

__all__ = ["CapabilityAuthorizer"]


@dataclass(frozen=True, slots=True)
class _Outcome:
    reason: AuthorizationReason
    grant_id: str | None = None
    consumed: bool = False
    fail_closed: bool | None = None
    cause: str | None = None

    @property
    def allowed(self) -> bool:
        return self.reason == "allowed"


_SNAPSHOT: ContextVar[dict[tuple[str, Any, Any], Any] | None] = ContextVar(
    "sharedos_grant_snapshot", default=None)


class CapabilityAuthorizer:
    """Answers "may this context do this action on this resource?" from trusted grants.

    Args:
        grants: the host's trusted grant source.
        usage: the atomic use counters for ``maxUses`` grants; ``None`` makes every
            matching ``maxUses`` grant fail closed (``usage_store_unavailable``).
        audit: where every decision is recorded as ``authorization.checked``.
    """

    def __init__(
        self, grants: GrantSource, usage: GrantUsageStore | None, audit: AuditSink
    ) -> None:
        self._grants = grants
        self._usage = usage
        self._audit = audit

    @contextmanager
    def snapshot(self) -> Iterator[None]:
        """Within the block, load the grants of each (namespace, actor, authority) once.

        SharedOS resolves a turn's authority once; the kernel wraps each operation
        (and the turn executor each turn) in a snapshot so discovery, admission and
        consumption decide against one grant set. Use counters are never cached.
        Nested snapshots share the outermost one.
        """
        token = _SNAPSHOT.set({}) if _SNAPSHOT.get() is None else None
        try:
            yield
        finally:
            if token is not None:
                _SNAPSHOT.reset(token)

    async def check(
        self,
        context: AccessContext,
        requirement: CapabilityRequirement,
        *,
        operation_id: str | None = None,
    ) -> AuthorizationDecision:
        """Decide for discovery: never spends a use (``maxUses`` grants need ``used < maxUses``).

        Returns:
            The audited decision; ``audit_unavailable`` when the record could not be written.
        """
        return await self._decide(context, requirement, consume=False, operation_id=operation_id)

    async def consume(
        self,
        context: AccessContext,
        requirement: CapabilityRequirement,
        *,
        operation_id: str | None = None,
    ) -> AuthorizationDecision:
        """Decide for execution: spends exactly one use of the matched ``maxUses`` grant.

        Returns:
            The audited decision (``consumed`` in the record says whether a use was
            spent); ``audit_unavailable`` when the record could not be written, in
            which case the caller must not perform the effect.
        """
        return await self._decide(context, requirement, consume=True, operation_id=operation_id)

    async def can_reach(self, context: AccessContext, namespace: str, action: str) -> bool:
        """True when some eligible, non-exhausted grant allows ``action`` in ``namespace``.

        A discovery helper (e.g. whether to offer ``messages.request``): it never
        spends a use and is not audited (no resource is decided). Delegated grants
        are skipped; any failure of a port answers False.
        """
        checked = checked_context(context)
        if checked is None:
            return False
        context, now_ms = checked
        grants = await self._load(context)
        if isinstance(grants, _Outcome):
            return False
        for grant in grants:
            if grant.parent_grant_id is not None or not self._eligible(grant, context, now_ms):
                continue
            if not any(capability_reaches(capability, namespace, action, context.owner)
                       for capability in grant.capabilities):
                continue
            max_uses = grant.constraints.max_uses
            if max_uses is None or await self._spend(context, grant, max_uses, False) is True:
                return True
        return False

    async def _decide(
        self,
        context: AccessContext,
        requirement: CapabilityRequirement,
        *,
        consume: bool,
        operation_id: str | None,
    ) -> AuthorizationDecision:
        checked = checked_context(context)
        request: CapabilityRequirement | None = None
        if checked is None:
            outcome = _Outcome("invalid_context")
        else:
            context, now_ms = checked
            request = checked_requirement(requirement, context)
            if request is None:
                outcome = _Outcome("invalid_request")
            else:
                outcome = await self._evaluate(context, request, now_ms, consume)
        event = _decision_event(context, request, outcome, consume, operation_id)
        if event is None and outcome.allowed:
            return AuthorizationDecision(allowed=False, reason_code="audit_unavailable")
        if event is not None:
            try:
                await self._audit.record(event)
            except Exception:  # any sink failure: the record was not written
                return AuthorizationDecision(allowed=False, reason_code="audit_unavailable")
        return AuthorizationDecision(
            allowed=outcome.allowed,
            reason_code=outcome.reason,
            matched_grant_id=outcome.grant_id if outcome.allowed else None,
        )

    async def _evaluate(
        self,
        context: AccessContext,
        requirement: CapabilityRequirement,
        now_ms: int,
        consume: bool,
    ) -> _Outcome:
        grants = await self._load(context)
        if isinstance(grants, _Outcome):
            return grants
        exhausted = unverified = False
        for grant in grants:
            if not self._eligible(grant, context, now_ms):
                continue
            if covering_capability(grant, requirement, context) is None:
                continue
            if grant.parent_grant_id is not None:
                unverified = True
                continue
            max_uses = grant.constraints.max_uses
            if max_uses is None:
                return _Outcome("allowed", grant.id)
            spent = await self._spend(context, grant, max_uses, consume)
            if isinstance(spent, _Outcome):
                return spent
            if spent:
                return _Outcome("allowed", grant.id, consumed=consume)
            exhausted = True
        if exhausted:
            return _Outcome("grant_exhausted")
        if unverified:
            return _Outcome("delegation_chain_unverified", cause="delegation_not_supported")
        return _Outcome("no_matching_grant")

    async def _load(self, context: AccessContext) -> Sequence[CapabilityGrant] | _Outcome:
        cache = _SNAPSHOT.get()
        if cache is None:
            return await self._fetch(context)
        key = (context.namespace_id, context.actor, context.authority)
        found = cache.get(key)
        if found is None:
            found = cache[key] = await self._fetch(context)
        return found

    async def _fetch(self, context: AccessContext) -> Sequence[CapabilityGrant] | _Outcome:
        try:
            answer = await self._grants.grants_for(
                context.namespace_id, context.actor, context.authority
            )
        except Exception:  # any source failure refuses the whole set (fail closed)
            return _Outcome("authority_unavailable", fail_closed=True, cause="grant_source_failed")
        grants = checked_grants(answer, context)
        if isinstance(grants, str):
            return _Outcome("authority_unavailable", fail_closed=True, cause=grants)
        return grants

    @staticmethod
    def _eligible(grant: CapabilityGrant, context: AccessContext, now_ms: int) -> bool:
        return grant_active(grant, now_ms) and purpose_allowed(grant, context.purpose)

    async def _spend(
        self, context: AccessContext, grant: CapabilityGrant, max_uses: int, consume: bool
    ) -> bool | _Outcome:
        """Spend (or, for discovery, look for) one use; an _Outcome when the store fails."""
        if self._usage is None:
            return _Outcome("usage_store_unavailable", grant.id, fail_closed=True,
                            cause="usage_store_missing")
        try:
            if consume:
                return await self._usage.consume(context.namespace_id, grant.id, max_uses) is True
            used = await self._usage.used(context.namespace_id, grant.id)
            return isinstance(used, int) and used < max_uses
        except Exception:  # any store failure fails closed
            return _Outcome("usage_store_unavailable", grant.id, fail_closed=True,
                            cause="usage_store_failed")


def _decision_event(
    context: AccessContext,
    requirement: CapabilityRequirement | None,
    outcome: _Outcome,
    consume: bool,
    operation_id: str | None,
) -> AuditEvent | None:
    """The ``authorization.checked`` record, or None when the context cannot be attributed."""
    fields: dict[str, Any] = {
        "reason": outcome.reason,
        "grant_id": outcome.grant_id,
        "consumed": outcome.consumed,
        "fail_closed": outcome.fail_closed,
        "cause": outcome.cause,
        "operation_id": operation_id,
        "metadata": {"mode": "consume" if consume else "check"},
    }
    if requirement is not None:
        fields.update(resource=requirement.resource, action=requirement.action)
    outcome_name: AuditOutcome = "allowed" if outcome.allowed else "denied"
    try:
        return audit_event(context, "authorization.checked", outcome_name, **fields)
    except Exception:  # a malformed (model_construct'd) context may fail anywhere
        pass
    try:  # the context's ``now`` may be what is malformed: stamp with the wall clock
        return audit_event(context, "authorization.checked", outcome_name,
                           at=format_timestamp(), **fields)
    except Exception:  # nothing valid can be attributed to this context
        return None
