"""Single-process implementations of the kernel's grant, usage and audit ports.

Owns :class:`InMemoryGrantSource`, :class:`InMemoryGrantUsageStore` and
:class:`InMemoryAuditSink`: real implementations for one process (tests,
examples, embedded hosts), not mocks. The Redis host has its own, atomic across
processes, in ``sharedos_redis/store``. Imports no I/O library.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

import anyio.lowlevel

from ..errors import AuditUnavailable, StoreUnavailable
from .contracts import (
    Address,
    AuditEvent,
    CapabilityGrant,
    format_timestamp,
    timestamp_ms,
)
from .ports import RevocationCheck

__all__ = ["InMemoryAuditSink", "InMemoryGrantSource", "InMemoryGrantUsageStore"]


class InMemoryGrantSource:
    """Grants kept in memory, per namespace, in insertion order.

    Attributes:
        fail: when True, :meth:`grants_for` raises ``StoreUnavailable`` (for tests
            of the fail-closed path).
    """

    def __init__(self, grants: Sequence[CapabilityGrant] = ()) -> None:
        self._grants: dict[str, dict[str, CapabilityGrant]] = {}
        self._revision = 0
        self.fail = False
        for grant in grants:
            self.put(grant)

    def put(self, grant: CapabilityGrant) -> None:
        """Store ``grant``, replacing any grant with the same id in its namespace."""
        self._grants.setdefault(grant.namespace_id, {})[grant.id] = grant

    def revoke(self, namespace_id: str, grant_id: str, at: str | datetime | None = None) -> bool:
        """Revoke a grant from ``at`` (default: now); an earlier revocation is kept.

        Returns:
            True when the grant exists (and is now revoked from ``at`` or earlier).
        """
        grant = self._grants.get(namespace_id, {}).get(grant_id)
        if grant is None:
            return False
        stamp = at if isinstance(at, str) else format_timestamp(at)
        if grant.revoked_at is None or timestamp_ms(stamp) < timestamp_ms(grant.revoked_at):
            # Re-parse so the stored grant is validated like any other.
            self.put(CapabilityGrant.from_wire({**grant.to_wire(), "revokedAt": stamp}))
            self._revision += 1
        return True

    async def check(self, namespace_id: str, grant_ids: Sequence[str],
                    at_ms: int) -> RevocationCheck:
        """The live revocation port: which of ``grant_ids`` are revoked at ``at_ms``.

        Raises:
            StoreUnavailable: when :attr:`fail` is set.
        """
        await anyio.lowlevel.checkpoint()
        if self.fail:
            raise StoreUnavailable("grants.check", "unavailable (test switch)")
        stored = self._grants.get(namespace_id, {})
        revoked = frozenset(
            grant_id for grant_id in grant_ids
            if (grant := stored.get(grant_id)) is not None and grant.revoked_at is not None
            and timestamp_ms(grant.revoked_at) <= at_ms)
        return RevocationCheck(revision=str(self._revision), revoked=revoked)

    async def chain(self, namespace_id: str, grant_id: str, limit: int) -> list[CapabilityGrant]:
        """The delegation chain resolver: ``grant_id`` and its ancestors (at most ``limit``).

        Raises:
            StoreUnavailable: when :attr:`fail` is set.
        """
        await anyio.lowlevel.checkpoint()
        if self.fail:
            raise StoreUnavailable("grants.chain", "unavailable (test switch)")
        stored, found = self._grants.get(namespace_id, {}), list[CapabilityGrant]()
        next_id: str | None = grant_id
        while next_id is not None and len(found) < limit and next_id in stored:
            found.append(stored[next_id])
            next_id = stored[next_id].parent_grant_id
        return found

    async def grants_for(
        self, namespace_id: str, actor: Address, authority: Address, /
    ) -> Sequence[CapabilityGrant]:
        """The grants of (namespace, subject = actor, issuer = authority).

        Raises:
            StoreUnavailable: when :attr:`fail` is set.
        """
        await anyio.lowlevel.checkpoint()
        if self.fail:
            raise StoreUnavailable("grants_for", "InMemoryGrantSource.fail is set")
        return [
            grant
            for grant in self._grants.get(namespace_id, {}).values()
            if grant.subject == actor and grant.issuer == authority
        ]


class InMemoryGrantUsageStore:
    """Use counters for ``maxUses`` grants, atomic under anyio concurrency.

    The check-and-increment in :meth:`consume` runs without an await in between,
    so concurrent tasks of one event loop can never overspend a grant.

    Attributes:
        fail: when True, every call raises ``StoreUnavailable`` (for tests).
    """

    def __init__(self) -> None:
        self._used: dict[tuple[str, str], int] = {}
        self.fail = False

    async def consume(self, namespace_id: str, grant_id: str, max_uses: int, /) -> bool:
        """Spend one use if fewer than ``max_uses`` were spent; True when spent.

        Raises:
            StoreUnavailable: when :attr:`fail` is set.
        """
        await anyio.lowlevel.checkpoint()
        self._raise_if_failing("consume")
        key = (namespace_id, grant_id)
        used = self._used.get(key, 0)
        if used >= max_uses:
            return False
        self._used[key] = used + 1
        return True

    async def used(self, namespace_id: str, grant_id: str, /) -> int:
        """How many uses of the grant were spent.

        Raises:
            StoreUnavailable: when :attr:`fail` is set.
        """
        await anyio.lowlevel.checkpoint()
        self._raise_if_failing("used")
        return self._used.get((namespace_id, grant_id), 0)

    async def release(self, namespace_id: str, grant_id: str, /) -> None:
        """Give back one reserved use (never below zero).

        Raises:
            StoreUnavailable: when :attr:`fail` is set.
        """
        await anyio.lowlevel.checkpoint()
        self._raise_if_failing("release")
        key = (namespace_id, grant_id)
        self._used[key] = max(0, self._used.get(key, 0) - 1)

    def _raise_if_failing(self, operation: str) -> None:
        if self.fail:
            raise StoreUnavailable(operation, "InMemoryGrantUsageStore.fail is set")


class InMemoryAuditSink:
    """An append-only list of audit events.

    Attributes:
        events: every recorded event, in order.
        fail: when True, :meth:`record` raises ``AuditUnavailable`` and records nothing.
    """

    def __init__(self) -> None:
        self.events: list[AuditEvent] = []
        self.fail = False

    async def record(self, event: AuditEvent, /) -> None:
        """Append ``event``.

        Raises:
            AuditUnavailable: when :attr:`fail` is set.
        """
        await anyio.lowlevel.checkpoint()
        if self.fail:
            raise AuditUnavailable("InMemoryAuditSink.fail is set")
        self.events.append(event)
