"""Plain helpers for store tests: grants, contexts and namespace cleanup."""

from __future__ import annotations

from typing import Any

from sharedos_redis.kernel.contracts import (
    AccessContext,
    Address,
    CapabilityGrant,
    agent,
    format_timestamp,
)

from ..support import drop_namespace
from ..support import scan_keyspace as namespace_keys

__all__ = ["drop_namespace", "make_context", "make_grant", "namespace_keys"]


def make_grant(ns: str, id: str = "g-1", *, subject: Address | None = None,
               issuer: Address | None = None, **extra: Any) -> CapabilityGrant:
    wire: dict[str, Any] = {
        "id": id, "namespaceId": ns,
        "subject": (subject or agent("bob")).to_wire(),
        "issuer": (issuer or agent("host")).to_wire(),
        "capabilities": [{"resource": {"namespace": "sharedos.messaging",
                                       "path": ["agent", "alice"]},
                          "actions": ["send"], "scope": "exact"}],
        "constraints": {}, "issuedAt": "2026-01-01T00:00:00Z", **extra,
    }
    return CapabilityGrant.from_wire(wire)


def make_context(ns: str) -> AccessContext:
    return AccessContext(namespace_id=ns, actor=agent("bob"), authority=agent("host"),
                         owner=agent("owner"), purpose="p", trace_id="t-1",
                         enabled_tool_namespaces=(), now=format_timestamp())
