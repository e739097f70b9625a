"""The authorizer's per-candidate gates: delegation chain, live revocation, host ceiling.

Owns :class:`Gates` and the per-turn grant snapshot (:data:`SNAPSHOT`). A
candidate grant that covers the request is checked here, in SharedOS's order:
its chain is resolved from the trusted resolver and validated (ADR 0008), then
one read of the live revocation source covers the candidate and every ancestor
(ADR 0027; the read that came with the walk's own grant load, when it covers them),
then the host ceiling may narrow the allowed decision (ADR 0020), before use
accounting. Private to :mod:`~sharedos_redis.kernel.authorizer`. Imports no I/O library.
"""

from __future__ import annotations

import inspect
from collections.abc import Sequence
from contextvars import ContextVar
from typing import Any

from ._decision import Outcome, Walk
from .contracts import AccessContext, AuthorizationDecision, CapabilityGrant, CapabilityRequirement
from .delegation import MAX_DELEGATION_LINKS, chain_problem
from .ports import (
    DelegationChainResolver,
    GrantRevocationSource,
    HostCeiling,
    PolicySource,
    RevocationCheck,
)

__all__ = ["SNAPSHOT", "Gates"]

SNAPSHOT: ContextVar[dict[tuple[str, Any, Any], Any] | None] = ContextVar(
    "sharedos_grant_snapshot", default=None)
"""Grant sets and chains loaded once per snapshot (see CapabilityAuthorizer.snapshot)."""


class Gates:
    """The chain, revocation and ceiling gates of one authorizer (any port may be absent)."""

    def __init__(self, chains: DelegationChainResolver | None,
                 revocations: GrantRevocationSource | None,
                 ceiling: HostCeiling | None = None,
                 policies: PolicySource | None = None) -> None:
        self._chains, self._revocations = chains, revocations
        self._ceiling, self._policies = ceiling, policies

    async def chain(self, context: AccessContext, grant: CapabilityGrant, walk: Walk,
                    now_ms: int, operation_ms: int | None) -> list[str] | None:
        """The ids a candidate stands on (itself first, then its ancestors), or None when
        its chain is unverifiable or broken (the first such problem is noted on ``walk``)."""
        if grant.parent_grant_id is None:
            return [grant.id]
        if self._chains is None:
            walk.unverified = walk.unverified or ("resolver_unavailable", grant.id)
            return None
        try:
            found = await self._load_chain(context, grant.parent_grant_id)
        except Exception:  # any resolver failure: the chain cannot be established
            walk.unverified = walk.unverified or ("resolver_failed", grant.id)
            return None
        problem = chain_problem(grant, found, context, now_ms, operation_ms)
        if problem is not None:
            if problem[0] == "parent_not_found":
                walk.unverified = walk.unverified or problem
            else:
                walk.invalid = walk.invalid or problem
            return None
        return [grant.id, *(ancestor.id for ancestor in found)]

    async def _load_chain(self, context: AccessContext,
                          parent_id: str) -> Sequence[CapabilityGrant]:
        """The parent and its ancestors, re-validated; once per snapshot, like the grants."""
        assert self._chains is not None
        cache = SNAPSHOT.get()
        key = ("chain", context.namespace_id, parent_id)
        if cache is not None and key in cache:
            cached: Sequence[CapabilityGrant] = cache[key]
            return cached
        answer = await self._chains.chain(context.namespace_id, parent_id,
                                          MAX_DELEGATION_LINKS + 1)
        found = tuple(CapabilityGrant.from_wire(g.to_wire()) for g in answer)
        if cache is not None:
            cache[key] = found
        return found

    async def revoked(self, context: AccessContext, checked: list[str],
                      walk: Walk) -> bool | Outcome:
        """One live revocation read over a candidate and its ancestors: True when any is
        revoked; an Outcome (``authority_unavailable``) when the read failed.

        The read that came with this walk's own grant load answers when it covers every
        id of ``checked`` (it was read for this decision); otherwise the source is read.
        """
        if self._revocations is None:
            return False
        try:
            prefetched = walk.prefetched
            if prefetched is not None and prefetched.checked.issuperset(checked):
                answer = prefetched.revocations
            else:
                answer = await self._revocations.check(context.namespace_id, tuple(checked),
                                                       walk.at_ms)
            if not isinstance(answer, RevocationCheck) or not isinstance(answer.revision, str):
                raise TypeError("malformed revocation check")
            revoked = sorted(set(answer.revoked) & set(checked))
        except Exception:  # any failure or malformed answer fails the decision closed
            walk.checks.append({"checked": checked, "status": "unavailable"})
            return walk.end("authority_unavailable", fail_closed=True,
                            cause="revocation_source_failed")
        walk.checks.append({"checked": checked, "status": "checked",
                            "revision": answer.revision, "revoked": revoked})
        return bool(revoked)

    async def narrow(self, context: AccessContext, requirement: CapabilityRequirement,
                     grant_id: str, walk: Walk) -> Outcome | None:
        """The host ceiling on an allowed candidate: None keeps it allowed, else the denial
        (``host_policy_denied``) or the fail-closed ``host_policy_unavailable``."""
        if self._ceiling is None:
            return None
        try:
            policy = await self._policy(context)
            allowed = AuthorizationDecision(allowed=True, reason_code="allowed",
                                            matched_grant_id=grant_id)
            answer: object = self._ceiling.narrow(allowed, requirement, context, policy)
        except Exception:  # a broken port or policy load: fail closed
            return walk.end("host_policy_unavailable", grant_id, fail_closed=True,
                            cause="host_ceiling_failed")
        if inspect.iscoroutine(answer):
            answer.close()  # an async ceiling: refused unrun (the contract is synchronous)
        if not isinstance(answer, AuthorizationDecision) or (
                answer.allowed and (answer.matched_grant_id != grant_id
                                    or answer.reason_code != "allowed")):
            # an awaitable (not synchronous) or a widened/altered allow: a malfunction
            return walk.end("host_policy_unavailable", grant_id, fail_closed=True,
                            cause="host_ceiling_malfunction")
        return None if answer.allowed else walk.end("host_policy_denied", grant_id,
                                                    cause="host_ceiling")

    async def _policy(self, context: AccessContext) -> object:
        """The host policy for ``context``: loaded once per snapshot (per turn)."""
        if self._policies is None:
            return None
        cache = SNAPSHOT.get()
        key = ("policy", context.namespace_id, context.actor)
        if cache is not None and key in cache:
            return cache[key]
        policy = await self._policies.load(context)
        if cache is not None:
            cache[key] = policy
        return policy
