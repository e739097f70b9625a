"""Delegated grants: the SharedOS chain rules (ADR 0008), pure and without I/O.

Owns :data:`MAX_DELEGATION_LINKS` and :func:`chain_problem`. A grant naming a
``parentGrantId`` allows only when its whole chain, fetched from the host's
trusted :class:`~.ports.DelegationChainResolver` (never from the request), holds
on every link: the child's issuer is the parent's subject, one namespace, the
parent active for the purpose, the parent not bounded by ``maxUses``, a
delegation depth that strictly decreases, every child capability inside one
parent capability, no wider window or purposes, never issued before its parent,
no cycle and at most :data:`MAX_DELEGATION_LINKS` links. Imports no I/O library.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

from .contracts import AccessContext, Capability, CapabilityGrant, timestamp_ms
from .matching import action_listed, grant_active, owner_matches, path_covered, purpose_allowed

__all__ = ["MAX_DELEGATION_LINKS", "chain_problem"]

MAX_DELEGATION_LINKS: Final = 16
"""Most child → parent links a chain may have."""


def _contained(child: Capability, parent: Capability, context: AccessContext) -> bool:
    held, given = parent.resource, child.resource
    if held.namespace != given.namespace or not owner_matches(held.owner, given.owner,
                                                             context.owner):
        return False
    if not all(action_listed(parent.actions, action) and (action != "*" or "*" in parent.actions)
               for action in child.actions):
        return False
    if parent.scope == "exact":
        return child.scope == "exact" and tuple(held.path) == tuple(given.path)
    return path_covered(held.path, given.path, "descendants")


def _narrower(child: CapabilityGrant, parent: CapabilityGrant) -> bool:
    """Window, purposes and issue order no wider than the parent's (an omission widens)."""
    mine, theirs = child.constraints, parent.constraints
    if theirs.purposes is not None and (
            mine.purposes is None or not set(mine.purposes) <= set(theirs.purposes)):
        return False
    if theirs.not_before is not None and (
            mine.not_before is None
            or timestamp_ms(mine.not_before) < timestamp_ms(theirs.not_before)):
        return False
    if theirs.expires_at is not None and (
            mine.expires_at is None
            or timestamp_ms(mine.expires_at) > timestamp_ms(theirs.expires_at)):
        return False
    return timestamp_ms(child.issued_at) >= timestamp_ms(parent.issued_at)


def _link_problem(child: CapabilityGrant, parent: CapabilityGrant, context: AccessContext,
                  now_ms: int, operation_ms: int | None) -> str | None:
    depth = parent.constraints.delegation_depth
    checks = (
        (child.issuer == parent.subject, "issuer_not_parent_subject"),
        (child.namespace_id == parent.namespace_id, "namespace_mismatch"),
        (grant_active(parent, now_ms, operation_ms)
         and purpose_allowed(parent, context.purpose), "parent_inactive"),
        (parent.constraints.max_uses is None, "bounded_parent_not_delegable"),
        (bool(depth), "delegation_not_permitted"),
        (depth is not None and (child.constraints.delegation_depth or 0) < depth,
         "delegation_depth_exceeded"),
        (all(any(_contained(mine, theirs, context) for theirs in parent.capabilities)
             for mine in child.capabilities), "capability_widened"),
        (_narrower(child, parent), "constraints_widened"),
    )
    return next((code for ok, code in checks if not ok), None)


def chain_problem(leaf: CapabilityGrant, ancestors: Sequence[CapabilityGrant],
                  context: AccessContext, now_ms: int,
                  operation_ms: int | None = None) -> tuple[str, str] | None:
    """The first broken link of ``leaf``'s chain: ``(code, grant id)``, or None when it holds.

    ``ancestors`` are the leaf's parent, its parent, ... as the trusted resolver
    returned them. Codes: ``chain_too_long``, ``chain_cycle``, ``parent_not_found``
    (an ancestor names a parent the resolver did not return: unverifiable), and the
    per-link codes ``issuer_not_parent_subject``, ``namespace_mismatch``,
    ``parent_inactive``, ``bounded_parent_not_delegable``,
    ``delegation_not_permitted``, ``delegation_depth_exceeded``,
    ``capability_widened`` and ``constraints_widened``.
    """
    seen = {leaf.id}
    child = leaf
    for links, parent in enumerate(ancestors, start=1):
        if links > MAX_DELEGATION_LINKS:
            return "chain_too_long", leaf.id
        if parent.id in seen:
            return "chain_cycle", parent.id
        if parent.id != child.parent_grant_id:
            return "parent_not_found", child.id
        seen.add(parent.id)
        problem = _link_problem(child, parent, context, now_ms, operation_ms)
        if problem is not None:
            return problem, child.id
        child = parent
    if child.parent_grant_id is not None:
        if child.parent_grant_id in seen:
            return "chain_cycle", child.parent_grant_id
        return ("chain_too_long", leaf.id) if len(ancestors) >= MAX_DELEGATION_LINKS else (
            "parent_not_found", child.id)
    return None
