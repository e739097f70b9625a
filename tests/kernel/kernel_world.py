"""A small trusted world for kernel tests: contexts, grants, a kernel on in-memory ports."""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from sharedos_redis.kernel.contracts import (
    AccessContext,
    Address,
    AuditEvent,
    CapabilityGrant,
    JsonValue,
    ToolCall,
    ToolDefinition,
    agent,
    format_timestamp,
    service,
)
from sharedos_redis.kernel.kernel import Kernel
from sharedos_redis.kernel.memory import (
    InMemoryAuditSink,
    InMemoryGrantSource,
    InMemoryGrantUsageStore,
)
from sharedos_redis.kernel.testing import InMemoryRouter, InMemoryTransport

NS = "acme"
AUTHORITY = service("acme-host")
OWNER = service("acme")
PURPOSE = "atlas-status"
TRACE = "t-1"
T0 = datetime(2026, 10, 4, 9, 0, tzinfo=UTC)
NOW = format_timestamp(T0)
ISSUED = "2026-10-04T08:00:00.000Z"
ALICE, BOB, CAROL, MALLORY = agent("alice"), agent("bob"), agent("carol"), agent("mallory")


def context(actor: Address, *, namespaces: Sequence[str] = ("messages", "files"),
            purpose: str = PURPOSE, trace: str = TRACE, now: str = NOW) -> AccessContext:
    """A trusted context for ``actor`` in namespace acme (``now``: its admission instant)."""
    return AccessContext.from_wire({
        "namespaceId": NS, "actor": actor.to_wire(), "authority": AUTHORITY.to_wire(),
        "owner": OWNER.to_wire(), "purpose": purpose, "traceId": trace,
        "enabledToolNamespaces": list(namespaces), "now": now})


def grant(grant_id: str, subject: Address, namespace: str, path: Sequence[str],
          actions: Sequence[str], *, max_uses: int | None = None,
          scope: str = "exact") -> CapabilityGrant:
    """One grant issued by the host authority to ``subject``."""
    constraints: dict[str, Any] = {} if max_uses is None else {"maxUses": max_uses}
    return CapabilityGrant.from_wire({
        "id": grant_id, "namespaceId": NS, "subject": subject.to_wire(),
        "issuer": AUTHORITY.to_wire(),
        "capabilities": [{"resource": {"namespace": namespace, "path": list(path)},
                          "actions": list(actions), "scope": scope}],
        "constraints": constraints, "issuedAt": ISSUED})


def send_grant(grant_id: str, subject: Address, recipient: Address, *,
               max_uses: int | None = None) -> CapabilityGrant:
    """``sharedos.messaging``/send to ``recipient``."""
    return grant(grant_id, subject, "sharedos.messaging", [recipient.kind, recipient.id],
                 ["send"], max_uses=max_uses)


def invoke_grant(grant_id: str, subject: Address, *,
                 max_uses: int | None = None) -> CapabilityGrant:
    """``sharedos.execution``/invoke on ``subject``'s own turn."""
    return grant(grant_id, subject, "sharedos.execution", ["agent", subject.id], ["invoke"],
                 max_uses=max_uses)


def file_tool(name: str = "files.read", path: Sequence[str] = ("reports",),
              action: str = "read") -> ToolDefinition:
    """A host tool in tool namespace ``files`` needing ``files``/``action`` on ``path``."""
    return ToolDefinition.from_wire({
        "name": name, "description": f"{action} a file", "namespace": "files", "source": "host",
        "readWrite": "read" if action == "read" else "write",
        "inputSchema": {"type": "object"},
        "requiredCapability": {"resource": {"namespace": "files", "path": list(path)},
                               "action": action}})


def tool_call(tool: str, arguments: dict[str, Any], *, call_id: str = "call-1",
              trace: str = TRACE, requested_at: str = NOW) -> ToolCall:
    """A runtime-authored tool call."""
    return ToolCall.from_wire({"id": call_id, "tool": tool, "arguments": arguments,
                               "traceId": trace, "requestedAt": requested_at})


@dataclass
class World:
    """A kernel on in-memory ports, with handles on each port."""

    grants: InMemoryGrantSource
    usage: InMemoryGrantUsageStore
    audit: InMemoryAuditSink
    transport: InMemoryTransport | None
    router: InMemoryRouter | None
    kernel: Kernel
    message_ids: list[str] = field(default_factory=list)
    handled: list[ToolCall] = field(default_factory=list)

    def register_files(self, definition: ToolDefinition | None = None,
                       output: JsonValue = "report") -> ToolDefinition:
        """Register a recording file tool."""
        definition = definition or file_tool()

        async def handler(ctx: AccessContext, call: ToolCall) -> JsonValue:
            self.handled.append(call)
            return output

        self.kernel.register_tool(definition, handler)
        return definition

    def audit_of(self, type: str) -> list[AuditEvent]:
        """The recorded audit events of one type."""
        return [event for event in self.audit.events if event.type == type]


def make_world(*grants: CapabilityGrant, transport: InMemoryTransport | None = None,
               router: InMemoryRouter | None = None, with_transport: bool = True,
               with_router: bool = True, clock: Callable[[], datetime] = lambda: T0,
               live_revocation: bool = False, chains: bool = False) -> World:
    """A world holding ``grants``; transport and router configured unless told otherwise."""
    source = InMemoryGrantSource(grants)
    usage, audit = InMemoryGrantUsageStore(), InMemoryAuditSink()
    transport = transport or (InMemoryTransport() if with_transport else None)
    router = router or (InMemoryRouter(payload={"status": "green"}) if with_router else None)
    counter = itertools.count(1)
    issued: list[str] = []

    def message_ids() -> str:
        issued.append(f"msg-{next(counter)}")
        return issued[-1]

    kernel = Kernel(grants=source, audit=audit, usage=usage, transport=transport, router=router,
                    message_ids=message_ids, clock=clock,
                    revocations=source if live_revocation else None,
                    chains=source if chains else None)
    return World(source, usage, audit, transport, router, kernel, issued)
