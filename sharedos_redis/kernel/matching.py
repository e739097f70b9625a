"""Pure grant-matching rules of SharedOS authorization (SPEC §2, steps 1-5).

Owns the functions that decide, without I/O, whether a context and a request
are well formed, whether a grant set is in scope, whether a grant is eligible at
``now`` for a purpose, and whether one capability covers one request. The
authorizer (``authorizer.py``) sequences them with the grant source, the usage
store and the audit sink. Imports no I/O library.

Every match is evaluated against one capability of one grant: fields of
different grants (or of different capabilities of one grant) never combine.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

from .contracts import (
    AccessContext,
    Address,
    Capability,
    CapabilityGrant,
    CapabilityRequirement,
    timestamp_ms,
)

__all__ = [
    "MAX_GRANTS",
    "WILDCARD_ACTION",
    "action_listed",
    "capability_covers",
    "capability_reaches",
    "ceiling_reached",
    "checked_context",
    "checked_grants",
    "checked_requirement",
    "covering_capability",
    "grant_active",
    "grant_in_scope",
    "owner_matches",
    "path_covered",
    "purpose_allowed",
    "within_ceiling",
]

MAX_GRANTS: Final = 256
"""A grant source returning more grants than this is refused whole."""

WILDCARD_ACTION: Final = "*"


def checked_context(context: AccessContext) -> tuple[AccessContext, int] | None:
    """Re-validate a context; return it with its ``now`` in epoch ms, or None when invalid.

    A context built with ``model_construct`` skipped validation; this catches an
    empty purpose or traceId, an unparseable ``now`` and anything else malformed.
    """
    try:
        if type(context) is AccessContext and context.is_validated:
            return context, timestamp_ms(context.now)
        checked = AccessContext.from_wire(context.to_wire())
        return checked, timestamp_ms(checked.now)
    except Exception:  # any failure to re-validate means the context is unusable
        return None


def checked_requirement(
    requirement: CapabilityRequirement, context: AccessContext
) -> CapabilityRequirement | None:
    """Re-validate a request; None when malformed or its owner is not ``context.owner``."""
    try:
        if type(requirement) is CapabilityRequirement and requirement.is_validated:
            checked = requirement
        else:
            checked = CapabilityRequirement.from_wire(requirement.to_wire())
    except Exception:  # any failure to re-validate means the request is unusable
        return None
    owner = checked.resource.owner
    return checked if owner is None or owner == context.owner else None


def grant_in_scope(grant: CapabilityGrant, context: AccessContext) -> bool:
    """True when the grant belongs to the context's (namespace, actor, authority)."""
    return (
        grant.namespace_id == context.namespace_id
        and grant.subject == context.actor
        and grant.issuer == context.authority
    )


def _checked_grant(grant: object) -> CapabilityGrant | None:
    if not isinstance(grant, CapabilityGrant):
        return None
    if type(grant) is CapabilityGrant and grant.is_validated:
        return grant
    try:
        return CapabilityGrant.from_wire(grant.to_wire())
    except Exception:  # a model_construct'd grant may fail anywhere in the round trip
        return None


def checked_grants(grants: object, context: AccessContext) -> tuple[CapabilityGrant, ...] | str:
    """Re-validate a grant source's answer; return the grants, or why it is refused whole.

    Refusal causes: ``grant_set_invalid`` (not a sequence), ``too_many_grants``
    (more than :data:`MAX_GRANTS`), ``grant_invalid`` (not a valid CapabilityGrant)
    and ``grant_out_of_scope`` (another namespace, subject or issuer).
    """
    if not isinstance(grants, Sequence) or isinstance(grants, str | bytes):
        return "grant_set_invalid"
    if len(grants) > MAX_GRANTS:
        return "too_many_grants"
    checked: list[CapabilityGrant] = []
    for grant in grants:
        valid = _checked_grant(grant)
        if valid is None:
            return "grant_invalid"
        if not grant_in_scope(valid, context):
            return "grant_out_of_scope"
        checked.append(valid)
    return tuple(checked)


def _ms(value: str) -> int | None:
    try:
        return timestamp_ms(value)
    except ValueError:
        return None


def grant_active(grant: CapabilityGrant, now_ms: int, operation_ms: int | None = None) -> bool:
    """True when ``issuedAt <= now``, ``notBefore <= now``, not revoked at ``now`` and
    ``operation < expiresAt``.

    Two instants (SharedOS ADR 0016): ``now_ms`` is when the turn's authority was
    resolved (admission); ``operation_ms`` the instant of this decision. Only expiry
    moves with the operation, at the later of the two, because the operation's clock
    may only take authority away; ``issuedAt``, ``notBefore`` and revocation stay at
    admission. Comparisons are at millisecond precision; expiry or revocation at
    exactly the instant is inactive; an unparseable declared timestamp makes the
    grant inactive.
    """
    issued = _ms(grant.issued_at)
    if issued is None or issued > now_ms:
        return False
    limits = grant.constraints
    if limits.not_before is not None:
        not_before = _ms(limits.not_before)
        if not_before is None or now_ms < not_before:
            return False
    expiry_ms = now_ms if operation_ms is None else max(now_ms, operation_ms)
    for ending, instant in ((limits.expires_at, expiry_ms), (grant.revoked_at, now_ms)):
        if ending is None:
            continue
        end_ms = _ms(ending)
        if end_ms is None or instant >= end_ms:
            return False
    return True


def purpose_allowed(grant: CapabilityGrant, purpose: str) -> bool:
    """True when the grant lists no purposes or lists ``purpose`` exactly."""
    purposes = grant.constraints.purposes
    return purposes is None or purpose in purposes


def action_listed(actions: Sequence[str], action: str) -> bool:
    """True when ``action`` is listed or ``"*"`` is; a requested ``"*"`` needs a listed ``"*"``."""
    return action in actions or WILDCARD_ACTION in actions


def owner_matches(granted: Address | None, requested: Address | None, owner: Address) -> bool:
    """Compare owners, a missing owner on either side meaning the context's ``owner``."""
    return (granted or owner) == (requested or owner)


def path_covered(granted: Sequence[str], requested: Sequence[str], scope: str) -> bool:
    """``exact``: equal segment arrays; ``descendants``: whole-segment prefix (or equal)."""
    if scope == "exact":
        return tuple(granted) == tuple(requested)
    if scope == "descendants":
        return len(granted) <= len(requested) and tuple(requested[: len(granted)]) == tuple(
            granted
        )
    return False


def capability_covers(
    capability: Capability, requirement: CapabilityRequirement, owner: Address
) -> bool:
    """True when this one capability covers the whole request (namespace, action, owner, path)."""
    granted, requested = capability.resource, requirement.resource
    return (
        granted.namespace == requested.namespace
        and action_listed(capability.actions, requirement.action)
        and owner_matches(granted.owner, requested.owner, owner)
        and path_covered(granted.path, requested.path, capability.scope)
    )


def covering_capability(
    grant: CapabilityGrant, requirement: CapabilityRequirement, context: AccessContext
) -> Capability | None:
    """The first capability of ``grant`` that covers the request alone, if any."""
    for capability in grant.capabilities:
        if capability_covers(capability, requirement, context.owner):
            return capability
    return None


def capability_reaches(capability: Capability, namespace: str, action: str, owner: Address) -> bool:
    """True when the capability grants ``action`` (or ``"*"``) somewhere in ``namespace``.

    Used for discovery only (is some resource of this namespace reachable at all);
    the capability's owner must be the context's ``owner``.
    """
    return (
        capability.resource.namespace == namespace
        and action_listed(capability.actions, action)
        and owner_matches(capability.resource.owner, None, owner)
    )


def within_ceiling(requirement: CapabilityRequirement, ceiling: CapabilityRequirement,
                   owner: Address) -> bool:
    """True when a per-call requirement stays inside a tool's declared ceiling.

    Same resource namespace and action, same owner (missing meaning ``owner``) and
    a path at or below the ceiling's path (whole segments).
    """
    granted, requested = ceiling.resource, requirement.resource
    return (
        granted.namespace == requested.namespace
        and ceiling.action == requirement.action
        and owner_matches(granted.owner, requested.owner, owner)
        and path_covered(granted.path, requested.path, "descendants")
    )


def ceiling_reached(
    grant: CapabilityGrant, ceiling: CapabilityRequirement, context: AccessContext
) -> Capability | None:
    """The first capability of ``grant`` that covers *some* request inside ``ceiling``.

    Discovery of a tool that resolves its requirement per call: the tool is shown
    when some call could be allowed, i.e. a capability with the ceiling's namespace,
    action and owner whose path covers the ceiling's path or lies below it.
    """
    granted = ceiling.resource
    for capability in grant.capabilities:
        held = capability.resource
        if not (held.namespace == granted.namespace
                and action_listed(capability.actions, ceiling.action)
                and owner_matches(held.owner, granted.owner, context.owner)):
            continue
        if path_covered(held.path, granted.path, capability.scope) or path_covered(
                granted.path, held.path, "descendants"):
            return capability
    return None
