"""The capability authorizer: deny by default, one audited decision per question.

Owns :class:`CapabilityAuthorizer`, which implements SharedOS authorization
(SPEC §2, steps 1-7) over three host ports: a trusted :class:`GrantSource`, an
atomic :class:`GrantUsageStore` and an :class:`AuditSink`. The pure matching
rules live in ``matching.py``. Imports no I/O library.

Choices where the SPEC leaves room (documented deviations):

* **Delegated grants** (``parentGrantId``) allow only when their chain, fetched
  from the trusted :class:`DelegationChainResolver`, holds on every link
  (``delegation.py``). A broken chain is ``delegation_chain_invalid``; one that
  cannot be established (no resolver, an ancestor missing, the resolver failing)
  is ``delegation_chain_unverified`` and is reported first; ``grant_exhausted``
  outranks both. The failing link's code is the record's ``cause``.
* **Usage store** missing or failing for a matching ``maxUses`` grant stops the
  walk at once with ``usage_store_unavailable`` (fail closed), even if a later
  grant could have allowed the request.
* **Consume, then audit.** On ``consume`` the use is spent first, because the
  audit record must state whether a use was spent (``consumed``). If the record
  then cannot be written the decision is ``audit_unavailable`` and the effect
  must not happen; the spent use is **not** refunded (fail closed: a lost use
  is safe, a refund would race with other consumers). Inside an open
  :class:`~.outbox.EffectAudit` an allowed consuming decision's record goes there
  instead: the effect writes it atomically with itself (ADR 0029).
* **Two instants** (ADR 0016): ``context.now`` is when the turn's authority was
  resolved; the authorizer's clock gives the operation instant. Expiry is
  decided at the later of the two (a grant expiring mid-turn is refused from the
  next call); ``issuedAt``, ``notBefore`` and ``revokedAt`` at admission.
* **Live revocation** (ADR 0027, optional :class:`GrantRevocationSource`): read
  once per qualifying candidate, after matching and before use accounting; a
  revoked candidate is skipped, a failed or malformed read fails the decision
  closed (``authority_unavailable``). The reads go to ``metadata.revocationChecks``.
  When one object is both the grant source and the revocation source and offers
  :class:`CheckedGrantSource`, a decision that loads the grants (a snapshot miss)
  reads the revocation state of the loaded ids in the same read, and its own walk
  answers from it for candidates whose whole chain it covers; any other check, and
  every later decision of the snapshot, reads the source afresh (still one fresh
  read per decision).
* **Unauditable decisions.** A context so malformed that no valid audit record
  can be attributed to it (e.g. an empty purpose) is denied ``invalid_context``
  without a record; an *allowed* decision is never returned unaudited (its record
  is written, or waits in the effect's outbox, which no effect happens without).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager, suppress
from datetime import datetime
from functools import lru_cache

from ._decision import CHECK, CONSUME, REACH, VISIBLE, Mode, Outcome, Walk, decision_event
from .audit import audit_event
from .contracts import (
    AccessContext,
    AuthorizationDecision,
    CapabilityGrant,
    CapabilityRequirement,
    ResourceRef,
    epoch_ms,
)
from .gates import SNAPSHOT, Gates
from .matching import (
    capability_reaches,
    checked_context,
    checked_grants,
    checked_requirement,
    grant_active,
    purpose_allowed,
)
from .outbox import effect_audit
from .ports import (
    AuditSink,
    CheckedGrants,
    CheckedGrantSource,
    DelegationChainResolver,
    GrantRevocationSource,
    GrantSource,
    GrantUsageStore,
    HostCeiling,
    PolicySource,
)
from .usage import UseReservation

__all__ = ["CapabilityAuthorizer"]

_TURN = ("turn", None, None)
"""The snapshot entry naming the turn a snapshot belongs to (see ``snapshot``)."""



@lru_cache(maxsize=256)
def _reach_requirement(namespace: str, action: str) -> CapabilityRequirement:
    """``{namespace, []}`` with ``action``: what ``can_reach`` asks the host ceiling about
    (frozen and validated, so one instance serves every call)."""
    return CapabilityRequirement(resource=ResourceRef(namespace=namespace, path=()),
                                 action=action)


class CapabilityAuthorizer:
    """Answers "may this context do this action on this resource?" from trusted grants.

    Args:
        grants: the host's trusted grant source.
        usage: the atomic use counters for ``maxUses`` grants; ``None`` makes every
            matching ``maxUses`` grant fail closed (``usage_store_unavailable``).
        audit: where every decision is recorded as ``authorization.checked``.
        clock: the operation instant (expiry is decided at the later of it and
            ``context.now``); None decides everything at ``context.now``.
        revocations: live revocation (ADR 0027); None keeps revocation snapshot-bound.
        chains: the trusted resolver of delegated grants' ancestors; None makes every
            delegated grant unverifiable.
        ceiling / policies: the host ceiling (ADR 0020) and the policy it reads, loaded
            once per snapshot; None: the grants are the only policy.
    """

    def __init__(
        self, grants: GrantSource, usage: GrantUsageStore | None, audit: AuditSink, *,
        clock: Callable[[], datetime] | None = None,
        revocations: GrantRevocationSource | None = None,
        chains: DelegationChainResolver | None = None,
        ceiling: HostCeiling | None = None,
        policies: PolicySource | None = None,
    ) -> None:
        self._grants = grants
        # one read for the grants and the first revocation check, when one object is both
        self._checked = (grants if isinstance(grants, CheckedGrantSource)
                         and revocations is grants else None)
        self._gates = Gates(chains, revocations, ceiling, policies)
        self._usage = usage
        self._audit = audit
        self._clock = clock

    @contextmanager
    def snapshot(self, turn_id: str | None = None) -> Iterator[None]:
        """Within the block, load the grants of each (namespace, actor, authority) once.

        SharedOS resolves a turn's authority once; the kernel wraps each operation
        (and the turn executor each turn) in a snapshot so discovery, admission and
        consumption decide against one grant set. Use counters are never cached.
        Nested snapshots share the outermost one, except that a snapshot opened for a
        turn (``turn_id``) is that turn's own: two turns, or two attempts of one turn,
        never share one (ADR 0027 turn lease isolation).
        """
        current = SNAPSHOT.get()
        token = None
        if current is None or (turn_id is not None and current.get(_TURN) != turn_id):
            token = SNAPSHOT.set({} if turn_id is None else {_TURN: turn_id})
        try:
            yield
        finally:
            if token is not None:
                SNAPSHOT.reset(token)

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
        return await self._decide(context, requirement, CHECK, operation_id)

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
        return await self._decide(context, requirement, CONSUME, operation_id)

    async def reach(
        self,
        context: AccessContext,
        ceiling: CapabilityRequirement,
        *,
        operation_id: str | None = None,
        count_uses: bool = True,
    ) -> AuthorizationDecision:
        """Decide whether *some* request inside ``ceiling`` could be allowed (never spends).

        Discovery of a tool that resolves its exact requirement per call. With
        ``count_uses=False`` an exhausted ``maxUses`` grant still reaches (the call
        then learns ``grant_exhausted`` from the exact decision).

        Returns:
            The audited decision; ``audit_unavailable`` when the record could not be written.
        """
        mode = REACH if count_uses else VISIBLE
        return await self._decide(context, ceiling, mode, operation_id)

    async def can_reach(self, context: AccessContext, namespace: str, action: str) -> bool:
        """True when some eligible, non-exhausted grant allows ``action`` in ``namespace``.

        A discovery helper (e.g. whether to offer ``messages.request``): it never
        spends a use and is not audited (no resource is decided). A delegated grant
        counts only when its chain holds; any failure of a port answers False.
        """
        checked = checked_context(context)
        if checked is None:
            return False
        context, now_ms = checked
        operation_ms = self._operation_ms()
        walk = Walk(at_ms=max(now_ms, operation_ms or now_ms))
        grants = await self._load(context, walk)
        if isinstance(grants, Outcome):
            return False
        reach = _reach_requirement(namespace, action)
        for grant in grants:
            if not self._eligible(grant, context, now_ms, operation_ms) or not any(
                    capability_reaches(capability, namespace, action, context.owner)
                    for capability in grant.capabilities):
                continue
            chain = await self._gates.chain(context, grant, walk, now_ms, operation_ms)
            if chain is None:
                continue
            reached = await self._reaches(context, reach, grant, walk, chain)
            if reached is not None:
                return reached
        return False

    async def _reaches(self, context: AccessContext, reach: CapabilityRequirement,
                       grant: CapabilityGrant, walk: Walk, chain: list[str]) -> bool | None:
        """One reaching candidate past the gates: True/False decides, None walks on."""
        revoked = await self._gates.revoked(context, chain, walk)
        if isinstance(revoked, Outcome):
            return False  # an outage is never an empty reachable surface
        if revoked or await self._gates.narrow(context, reach, grant.id, walk) is not None:
            return None
        max_uses = grant.constraints.max_uses
        if max_uses is None or await self._spend(context, grant, max_uses, False) is True:
            return True
        return None

    async def _decide(
        self,
        context: AccessContext,
        requirement: CapabilityRequirement,
        mode: Mode,
        operation_id: str | None,
    ) -> AuthorizationDecision:
        checked = checked_context(context)
        request: CapabilityRequirement | None = None
        if checked is None:
            outcome = Outcome("invalid_context")
        else:
            context, now_ms = checked
            request = checked_requirement(requirement, context)
            if request is None:
                outcome = Outcome("invalid_request")
            else:
                outcome = await self._evaluate(context, request, now_ms, mode)
        event = decision_event(context, request, outcome, mode.name, operation_id)
        if event is None and outcome.allowed:
            return AuthorizationDecision(allowed=False, reason_code="audit_unavailable")
        outbox = effect_audit.get()
        if event is not None and outcome.allowed and mode.spend and outbox is not None:
            outbox.events.append(event)  # written atomically with the effect (kernel.outbox)
        elif event is not None:
            try:
                await self._audit.record(event)
            except Exception:  # any sink failure: the record was not written
                return AuthorizationDecision(allowed=False, reason_code="audit_unavailable")
        return AuthorizationDecision(
            allowed=outcome.allowed,
            reason_code=outcome.reason,
            matched_grant_id=outcome.grant_id if outcome.allowed else None,
            metadata={"usageState": "reserved"} if outcome.consumed else None,
        )

    async def release_use(self, context: AccessContext, reservation: UseReservation, *,
                          reason: str, operation_id: str | None = None) -> bool:
        """Give back a reserved use whose effect was refused before admission, audited.

        A use is released at most once and only before admission (never a refund
        after an effect was admitted). When the store fails the use stays spent
        (the conservative side) and False is returned.
        """
        if reservation.released or self._usage is None:
            return reservation.released
        try:
            await self._usage.release(reservation.namespace_id, reservation.grant_id)
        except Exception:  # the use stays occupied: safe, and a lost release is only capacity
            return False
        reservation.released = True
        with suppress(Exception):  # the release stands; its record is after the fact
            await self._audit.record(audit_event(
                context, "grant.usage.released", "succeeded", grant_id=reservation.grant_id,
                operation_id=operation_id, reason=reason, metadata={"usageState": "released"}))
        return True

    async def _evaluate(
        self,
        context: AccessContext,
        requirement: CapabilityRequirement,
        now_ms: int,
        mode: Mode,
    ) -> Outcome:
        operation_ms = self._operation_ms()
        walk = Walk(at_ms=max(now_ms, operation_ms or now_ms))
        grants = await self._load(context, walk)
        if isinstance(grants, Outcome):
            return grants
        for grant in grants:
            if not self._eligible(grant, context, now_ms, operation_ms):
                continue
            if mode.match(grant, requirement, context) is None:
                continue
            ancestors = await self._gates.chain(context, grant, walk, now_ms, operation_ms)
            if ancestors is None:
                continue
            decided = await self._candidate(context, requirement, grant, walk, mode, ancestors)
            if decided is not None:
                return decided
        if walk.exhausted:
            return walk.end("grant_exhausted")
        if walk.unverified:
            return walk.end("delegation_chain_unverified", cause=walk.unverified[0])
        if walk.invalid:
            return walk.end("delegation_chain_invalid", cause=walk.invalid[0])
        return walk.end("no_matching_grant")

    async def _candidate(self, context: AccessContext, requirement: CapabilityRequirement,
                         grant: CapabilityGrant, walk: Walk, mode: Mode,
                         chain: list[str]) -> Outcome | None:
        """A matching grant with a valid chain: the revocation gate over the whole chain,
        the host ceiling, then use accounting; None walks on."""
        revoked = await self._gates.revoked(context, chain, walk)
        if isinstance(revoked, Outcome):
            return revoked
        if revoked:
            return None
        narrowed = await self._gates.narrow(context, requirement, grant.id, walk)
        if narrowed is not None:
            return narrowed
        max_uses = grant.constraints.max_uses
        if max_uses is None or not mode.uses:
            return walk.end("allowed", grant.id)
        spent = await self._spend(context, grant, max_uses, mode.spend)
        if isinstance(spent, Outcome):
            return spent
        if spent:
            return walk.end("allowed", grant.id, consumed=mode.spend)
        walk.exhausted = True
        return None

    async def _load(self, context: AccessContext,
                    walk: Walk) -> Sequence[CapabilityGrant] | Outcome:
        """The grants of ``context``: once per snapshot. A load that reads the revocation
        state with the grants (``CheckedGrantSource``) lends that read to ``walk`` alone:
        the decision that missed the snapshot; every later one reads revocation fresh."""
        cache = SNAPSHOT.get()
        if cache is None:
            return await self._fetch(context, walk)
        key = (context.namespace_id, context.actor, context.authority)
        found = cache.get(key)
        if found is None:
            found = cache[key] = await self._fetch(context, walk)
        return found

    async def _fetch(self, context: AccessContext,
                     walk: Walk) -> Sequence[CapabilityGrant] | Outcome:
        prefetched: CheckedGrants | None = None
        try:
            if self._checked is not None:
                prefetched = await self._checked.grants_checked(
                    context.namespace_id, context.actor, context.authority, walk.at_ms)
                answer = prefetched.grants
            else:
                answer = await self._grants.grants_for(
                    context.namespace_id, context.actor, context.authority)
        except Exception:  # any source failure refuses the whole set (fail closed)
            return Outcome("authority_unavailable", fail_closed=True, cause="grant_source_failed")
        grants = checked_grants(answer, context)
        if isinstance(grants, str):
            return Outcome("authority_unavailable", fail_closed=True, cause=grants)
        walk.prefetched = prefetched
        return grants

    def _operation_ms(self) -> int | None:
        return epoch_ms(self._clock()) if self._clock else None

    @staticmethod
    def _eligible(grant: CapabilityGrant, context: AccessContext, now_ms: int,
                  operation_ms: int | None) -> bool:
        return (grant_active(grant, now_ms, operation_ms)
                and purpose_allowed(grant, context.purpose))

    async def _spend(
        self, context: AccessContext, grant: CapabilityGrant, max_uses: int, consume: bool
    ) -> bool | Outcome:
        """Spend (or, for discovery, look for) one use; an Outcome when the store fails."""
        if self._usage is None:
            return Outcome("usage_store_unavailable", grant.id, fail_closed=True,
                            cause="usage_store_missing")
        try:
            if consume:
                return await self._usage.consume(context.namespace_id, grant.id, max_uses) is True
            used = await self._usage.used(context.namespace_id, grant.id)
            return isinstance(used, int) and used < max_uses
        except Exception:  # any store failure fails closed
            return Outcome("usage_store_unavailable", grant.id, fail_closed=True,
                            cause="usage_store_failed")
