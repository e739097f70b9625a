"""Authorization contracts: resources, capabilities, grants, the access context, decisions."""

from __future__ import annotations

from typing import Annotated, Literal, Self

from pydantic import Field, model_validator
from pydantic_core import PydanticCustomError

from ._base import (
    Action,
    Checked,
    Contract,
    Identifier,
    JsonObject,
    Lax,
    PathSegment,
    Purpose,
    Timestamp,
    timestamp_ms,
)
from .address import Address

__all__ = [
    "AccessContext",
    "AuthorizationDecision",
    "Capability",
    "CapabilityConstraints",
    "CapabilityGrant",
    "CapabilityRequirement",
    "ResourceRef",
]


class ResourceRef(Contract):
    """A host-independent reference to a resource (owner defaults to the context's)."""

    namespace: Identifier
    path: Annotated[tuple[PathSegment, ...], Lax, Field(max_length=64)]
    owner: Address | None = None


class Capability(Contract):
    """A positive capability: actions on a resource, exactly or with its descendants."""

    resource: ResourceRef
    actions: Annotated[tuple[Action, ...], Lax, Field(min_length=1, max_length=64)]
    scope: Literal["exact", "descendants"]


class CapabilityConstraints(Contract):
    """Purposes, a validity window, a use budget and a delegation depth."""

    purposes: Annotated[tuple[Purpose, ...], Lax, Field(min_length=1, max_length=64)] | None = None
    not_before: Timestamp | None = None
    expires_at: Timestamp | None = None
    max_uses: Annotated[int, Field(gt=0)] | None = None
    delegation_depth: Annotated[int, Field(ge=0)] | None = None

    @model_validator(mode="after")
    def _window(self) -> Self:
        if (self.not_before is not None and self.expires_at is not None
                and timestamp_ms(self.not_before) > timestamp_ms(self.expires_at)):
            raise PydanticCustomError("window", "notBefore must not be after expiresAt")
        return self


class CapabilityGrant(Checked):
    """Authority issued to one subject by one issuer, bounded by constraints."""

    id: Identifier
    namespace_id: Identifier
    subject: Address
    issuer: Address
    capabilities: Annotated[tuple[Capability, ...], Lax, Field(min_length=1, max_length=64)]
    constraints: CapabilityConstraints
    issued_at: Timestamp
    revoked_at: Timestamp | None = None
    parent_grant_id: Identifier | None = None
    metadata: JsonObject | None = None

    @model_validator(mode="after")
    def _not_own_parent(self) -> Self:
        if self.parent_grant_id is not None and self.parent_grant_id == self.id:
            raise PydanticCustomError("parent", "a grant must not name itself as its parent")
        return self


class CapabilityRequirement(Checked):
    """One (resource, action) pair that an operation needs."""

    resource: ResourceRef
    action: Action


def _distinct(values: tuple[str, ...]) -> tuple[str, ...]:
    if len(set(values)) != len(values):
        raise PydanticCustomError("distinct", "enabled tool namespaces must be unique")
    return values


class AccessContext(Checked):
    """The trusted context of one operation. It carries no grants."""

    namespace_id: Identifier
    actor: Address
    authority: Address
    owner: Address
    purpose: Purpose
    trace_id: Identifier
    enabled_tool_namespaces: Annotated[tuple[Identifier, ...], Lax, Field(max_length=256)]
    now: Timestamp

    @model_validator(mode="after")
    def _unique_namespaces(self) -> Self:
        _distinct(self.enabled_tool_namespaces)
        return self


class AuthorizationDecision(Contract):
    """The answer to one authorization question."""

    allowed: bool
    reason_code: Identifier
    matched_grant_id: Identifier | None = None
    metadata: JsonObject | None = None
