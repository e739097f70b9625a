"""The Redis-backed host ceiling (SharedOS ADR 0020): deny rules an operator sets.

Owns :class:`RedisHostPolicy`, both the kernel's ``PolicySource`` (one SMEMBERS
of ``sos:{ns}:policy:deny`` per turn) and its ``HostCeiling`` (a synchronous check
against that set). A rule is ``<resource namespace>:<action>`` or
``<resource namespace>:*``; an allowed decision whose requirement matches a rule
is denied ``host_policy_denied``. The set is empty by default: the grants are the
whole policy until an operator adds a rule. It can only narrow.
"""

from __future__ import annotations

from collections.abc import Awaitable
from typing import cast

from redis.asyncio import Redis

from ..kernel.contracts import AccessContext, AuthorizationDecision, CapabilityRequirement
from .boundary import STORE_ERRORS, store_unavailable
from .keys import Keys

__all__ = ["RedisHostPolicy"]


def _rule(namespace: str, action: str) -> str:
    return f"{namespace}:{action}"


class RedisHostPolicy:
    """Deny rules per namespace: a ``PolicySource`` and ``HostCeiling`` in one."""

    def __init__(self, redis: Redis) -> None:
        self._redis = redis

    async def deny(self, namespace_id: str, resource_namespace: str, action: str = "*") -> None:
        """Add a rule: deny ``action`` (``*``: every action) in ``resource_namespace``.

        Raises:
            StoreUnavailable: Redis failed.
        """
        await self._write("policy.deny", cast("Awaitable[int]", self._redis.sadd(
            Keys(namespace_id).policy_deny, _rule(resource_namespace, action))))

    async def allow(self, namespace_id: str, resource_namespace: str, action: str = "*") -> None:
        """Remove a rule added by :meth:`deny`.

        Raises:
            StoreUnavailable: Redis failed.
        """
        await self._write("policy.allow", cast("Awaitable[int]", self._redis.srem(
            Keys(namespace_id).policy_deny, _rule(resource_namespace, action))))

    async def load(self, context: AccessContext) -> frozenset[str]:
        """The namespace's deny rules (the kernel loads them once per turn).

        Raises:
            StoreUnavailable: Redis failed (the kernel fails closed).
        """
        try:
            members = await cast("Awaitable[set[bytes]]", self._redis.smembers(
                Keys(context.namespace_id).policy_deny))
        except STORE_ERRORS as exc:
            raise store_unavailable("policy.load", exc) from exc
        return frozenset(m.decode() if isinstance(m, bytes) else str(m) for m in members)

    def narrow(self, decision: AuthorizationDecision, requirement: CapabilityRequirement,
               context: AccessContext, policy: object) -> AuthorizationDecision:
        """Deny when a rule names the requirement's namespace and action (or ``*``)."""
        rules = policy if isinstance(policy, frozenset) else frozenset()
        namespace = requirement.resource.namespace
        if _rule(namespace, requirement.action) in rules or _rule(namespace, "*") in rules:
            return AuthorizationDecision(allowed=False, reason_code="host_policy_denied")
        return decision

    async def _write(self, operation: str, call: Awaitable[object]) -> None:
        try:
            await call
        except STORE_ERRORS as exc:
            raise store_unavailable(operation, exc) from exc
