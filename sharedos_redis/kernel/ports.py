"""The kernel's host ports (``typing.Protocol``); adapters never inherit them.

Imports no I/O library. Cancellation is anyio's: a port call that is cancelled
raises the backend's cancellation exception and must leave no partial effect
that a retry could not reconcile.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from .contracts import (
    AccessContext,
    Address,
    AuditEvent,
    AuthorizationDecision,
    CapabilityGrant,
    CapabilityRequirement,
    MessageDeliveryResult,
    MessageEnvelope,
)

__all__ = [
    "AuditSink",
    "CheckedGrantSource",
    "CheckedGrants",
    "DeferringAuditSink",
    "DelegationChainResolver",
    "GrantRevocationSource",
    "GrantSource",
    "GrantUsageStore",
    "HostCeiling",
    "MessageRequestRouter",
    "MessageTransport",
    "PolicySource",
    "RevocationCheck",
]


class GrantSource(Protocol):
    """The host's trusted grants of (namespace, actor, authority)."""

    async def grants_for(
        self, namespace_id: str, actor: Address, authority: Address, /
    ) -> Sequence[CapabilityGrant]:
        """Return the grants; raise anything to make the kernel fail closed."""
        ...


@dataclass(frozen=True)
class RevocationCheck:
    """One consistent read of revocation state (SharedOS ADR 0027).

    Attributes:
        revision: an opaque, namespace-scoped name of the state that was read.
        revoked: the subset of the checked grant ids that are revoked.
    """

    revision: str
    revoked: frozenset[str]


class GrantRevocationSource(Protocol):
    """Live revocation: makes a revocation reach the next decision of a running turn.

    Without it, a turn keeps the grant set it was admitted with (revocation is
    seen by the next turn). The host must answer with every revocation committed
    before the read began, in one consistent read over all ``grant_ids``, retain
    revocations and never reuse a grant id in a namespace.
    """

    async def check(self, namespace_id: str, grant_ids: Sequence[str], at_ms: int,
                    /) -> RevocationCheck:
        """Which of ``grant_ids`` are revoked at ``at_ms`` (the operation instant, epoch ms).

        Raise anything to fail the decision closed (``authority_unavailable``).
        """
        ...


@dataclass(frozen=True)
class CheckedGrants:
    """Grants loaded together with one live revocation read of their ids (ADR 0027).

    Attributes:
        grants: what :meth:`GrantSource.grants_for` would answer.
        checked: the grant ids the revocation read covers (at least the grants' ids).
        revocations: that read, as :meth:`GrantRevocationSource.check` of ``checked``
            would answer it at the same instant.
    """

    grants: Sequence[CapabilityGrant]
    checked: frozenset[str]
    revocations: RevocationCheck


@runtime_checkable
class CheckedGrantSource(GrantSource, GrantRevocationSource, Protocol):
    """A grant source that is also the live revocation source and answers both in one read.

    Optional: the kernel uses it only when the same object is installed as both ports.
    The revocation read it returns is fresh for the decision that loaded the grants and
    for that decision only (every later decision reads :meth:`check` again), so it
    obeys :class:`GrantRevocationSource`'s contract like a call of ``check`` would.
    """

    async def grants_checked(self, namespace_id: str, actor: Address, authority: Address,
                             at_ms: int, /) -> CheckedGrants:
        """``grants_for`` and ``check`` of the loaded ids at ``at_ms``, in one consistent read.

        Raise anything to fail closed, as a failed ``grants_for`` does.
        """
        ...


class DelegationChainResolver(Protocol):
    """The trusted lookup of a delegated grant's ancestors (SharedOS ADR 0008)."""

    async def chain(self, namespace_id: str, grant_id: str, limit: int, /,
                    ) -> Sequence[CapabilityGrant]:
        """Grant ``grant_id`` and its ancestors in order, at most ``limit`` grants.

        Stops early where a grant names no parent or the parent is not found (the
        kernel then reports the chain unverifiable); raise to fail it unverified too.
        """
        ...


class PolicySource(Protocol):
    """The host's own policy (SharedOS ADR 0020), loaded once per turn beside the grants."""

    async def load(self, context: AccessContext, /) -> object:
        """The policy for ``context`` (opaque to the kernel); raise to fail closed."""
        ...


class HostCeiling(Protocol):
    """Host policy that can only narrow an allowed decision (``host_policy_denied``).

    Synchronous by contract: it decides against the already-loaded policy, never a
    store or a model. It is shown only allowed decisions; it may return the decision
    it was given or a denial, anything else (or a raise) is ``host_policy_unavailable``.
    """

    def narrow(self, decision: AuthorizationDecision, requirement: CapabilityRequirement,
               context: AccessContext, policy: object, /) -> AuthorizationDecision:
        """The decision, or a denial."""
        ...


class GrantUsageStore(Protocol):
    """Atomic use counters for grants with ``maxUses``."""

    async def consume(self, namespace_id: str, grant_id: str, max_uses: int, /) -> bool:
        """Spend one use if fewer than ``max_uses`` were spent; True when spent."""
        ...

    async def used(self, namespace_id: str, grant_id: str, /) -> int:
        """How many uses were spent (discovery checks ``used < max_uses``)."""
        ...

    async def release(self, namespace_id: str, grant_id: str, /) -> None:
        """Give back one reserved use whose effect was refused before admission."""
        ...


class AuditSink(Protocol):
    """Append-only audit storage; ``record`` raises when the record was not written."""

    async def record(self, event: AuditEvent, /) -> None:
        """Durably append one event."""
        ...


@runtime_checkable
class DeferringAuditSink(AuditSink, Protocol):
    """An audit sink that can also write after-effect records in the background, in order.

    Before-effect records always go through ``record`` (the effect waits for them);
    records of effects that already happened may be queued with ``record_later``.
    """

    def record_later(self, event: AuditEvent, /) -> bool:
        """Queue ``event`` for the sink's background writer; False when it is not
        running (the caller then writes the event with ``record``)."""
        ...


class MessageTransport(Protocol):
    """Delivers an already-authorized envelope; the receipt keeps the trusted id."""

    async def deliver(
        self, context: AccessContext, envelope: MessageEnvelope, /
    ) -> MessageDeliveryResult:
        """Accept or deliver ``envelope``; a dead route is ``denied`` with the host's code."""
        ...


class MessageRequestRouter(Protocol):
    """Resolves the durable reply to an accepted request."""

    async def resolve_reply(
        self,
        context: AccessContext,
        request: MessageEnvelope,
        receipt: MessageDeliveryResult,
        /,
    ) -> MessageEnvelope:
        """Wait for the first settled reply whose replyTo is ``request.id``.

        Raises:
            RequestOutcomeError: the request ended without a reply (typed ``code``).
        """
        ...
