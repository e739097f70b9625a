"""Builders for the grants every host issues: turns, requests between agents, tool use.

A grant is authority from its issuer to one subject agent (SharedOS §2). The host
only honours grants whose issuer is the agent's ``AgentSpec.authority``, so
:class:`~sharedos_redis.worker.host.MessagingHost`'s ``allow_*`` methods issue them
as that authority. Ids are derived from what the grant allows, so issuing the same
grant again replaces it (and keeps its ``maxUses`` counter); pass ``grant_id`` for a
fresh counter. Imports no redis.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime, timedelta

from ..kernel.contracts import (
    Address,
    Capability,
    CapabilityConstraints,
    CapabilityGrant,
    ResourceRef,
    agent,
    format_timestamp,
)

__all__ = ["invoke_grant", "send_grant", "tool_grant"]


def _grant(grant_id: str, namespace: str, subject: str, issuer: Address, resource: ResourceRef,
           actions: Sequence[str], *, purposes: Sequence[str] | None, max_uses: int | None,
           expires_in_s: float | None, descendants: bool = False) -> CapabilityGrant:
    now = datetime.now(UTC)
    expires = None if expires_in_s is None else format_timestamp(
        now + timedelta(seconds=expires_in_s))
    return CapabilityGrant(
        id=grant_id, namespace_id=namespace, subject=agent(subject), issuer=issuer,
        capabilities=(Capability(resource=resource, actions=tuple(actions),
                                 scope="descendants" if descendants else "exact"),),
        constraints=CapabilityConstraints(
            purposes=tuple(purposes) if purposes else None, max_uses=max_uses,
            expires_at=expires),
        issued_at=format_timestamp(now - timedelta(seconds=1)))


def invoke_grant(namespace: str, agent_id: str, *, issuer: Address,
                 expires_in_s: float | None = None,
                 grant_id: str | None = None) -> CapabilityGrant:
    """``agent_id`` may run its own turns (``sharedos.execution``/invoke on itself)."""
    return _grant(grant_id or f"invoke:{agent_id}", namespace, agent_id, issuer,
                  ResourceRef(namespace="sharedos.execution", path=("agent", agent_id)),
                  ("invoke",), purposes=None, max_uses=None, expires_in_s=expires_in_s)


def send_grant(namespace: str, sender: str, recipient: str, *, issuer: Address,
               purposes: Sequence[str] | None = None, max_uses: int | None = None,
               expires_in_s: float | None = None,
               grant_id: str | None = None) -> CapabilityGrant:
    """``sender`` may ``messages.request`` ``recipient`` (``sharedos.messaging``/send),
    for ``purposes`` only when given, at most ``max_uses`` times when given."""
    return _grant(grant_id or f"send:{sender}:{recipient}", namespace, sender, issuer,
                  ResourceRef(namespace="sharedos.messaging", path=("agent", recipient)),
                  ("send",), purposes=purposes, max_uses=max_uses, expires_in_s=expires_in_s)


def tool_grant(namespace: str, agent_id: str, tool_namespace: str, path: Sequence[str],
               actions: Sequence[str], *, issuer: Address, descendants: bool = False,
               purposes: Sequence[str] | None = None, max_uses: int | None = None,
               expires_in_s: float | None = None,
               grant_id: str | None = None) -> CapabilityGrant:
    """``agent_id`` may use host tools needing ``actions`` on ``tool_namespace``/``path``
    (or anything under it, with ``descendants``)."""
    default_id = f"tool:{agent_id}:{tool_namespace}:{'/'.join(path)}:{','.join(actions)}"
    return _grant(grant_id or default_id, namespace, agent_id, issuer,
                  ResourceRef(namespace=tool_namespace, path=tuple(path)), actions,
                  purposes=purposes, max_uses=max_uses, expires_in_s=expires_in_s,
                  descendants=descendants)
