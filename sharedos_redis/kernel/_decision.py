"""The pieces of one authorization decision: its modes, its walk state and its record.

Private to :mod:`~sharedos_redis.kernel.authorizer`. Imports no I/O library.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Final

from .audit import audit_event
from .contracts import (
    AccessContext,
    AuditEvent,
    AuditOutcome,
    Capability,
    CapabilityGrant,
    CapabilityRequirement,
    JsonValue,
    format_timestamp,
)
from .matching import ceiling_reached, covering_capability
from .ports import CheckedGrants
from .reasons import AuthorizationReason

__all__ = ["CHECK", "CONSUME", "REACH", "VISIBLE", "Mode", "Outcome", "Walk", "decision_event"]


@dataclass(frozen=True, slots=True)
class Outcome:
    reason: AuthorizationReason
    grant_id: str | None = None
    consumed: bool = False
    fail_closed: bool | None = None
    cause: str | None = None
    checks: tuple[JsonValue, ...] = ()

    @property
    def allowed(self) -> bool:
        return self.reason == "allowed"


Matcher = Callable[[CapabilityGrant, CapabilityRequirement, AccessContext], Capability | None]


@dataclass(frozen=True, slots=True)
class Mode:
    """How one decision walks the grants: what matches, whether uses are spent or looked at."""

    name: str
    match: Matcher
    spend: bool = False
    uses: bool = True


CHECK: Final = Mode("check", covering_capability)
CONSUME: Final = Mode("consume", covering_capability, spend=True)
REACH: Final = Mode("reach", ceiling_reached)
VISIBLE: Final = Mode("visible", ceiling_reached, uses=False)


@dataclass(slots=True)
class Walk:
    """What one grant walk has seen so far.

    ``prefetched`` is the revocation read that came with this walk's own grant load (a
    snapshot miss): the revocation gate may answer from it in this walk only.
    """

    at_ms: int = 0
    exhausted: bool = False
    unverified: tuple[str, str] | None = None
    invalid: tuple[str, str] | None = None
    checks: list[JsonValue] = field(default_factory=list)
    prefetched: CheckedGrants | None = None

    def end(self, reason: AuthorizationReason, grant_id: str | None = None, **more: Any) -> Outcome:
        return Outcome(reason, grant_id, checks=tuple(self.checks), **more)


def decision_event(
    context: AccessContext,
    requirement: CapabilityRequirement | None,
    outcome: Outcome,
    mode: str,
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
        "metadata": {"mode": mode,
                     **({"usageState": "reserved"} if outcome.consumed else {}),
                     **({"revocationChecks": list(outcome.checks)} if outcome.checks else {})},
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
