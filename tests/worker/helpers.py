"""Builders for worker tests: agents, grants and a host on the test's Redis."""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Mapping
from datetime import UTC, datetime, timedelta
from typing import Any

from redis.asyncio import Redis

from sharedos_redis.kernel.contracts import (
    AccessContext,
    Capability,
    CapabilityConstraints,
    CapabilityGrant,
    CapabilityRequirement,
    JsonValue,
    ResourceRef,
    ToolCall,
    ToolDefinition,
    agent,
    format_timestamp,
    human,
)
from sharedos_redis.kernel.scripted import ScriptedRuntime
from sharedos_redis.kernel.turn import RuntimeHost, TurnRequest
from sharedos_redis.worker.host import AgentSpec, MessagingHost
from sharedos_redis.worker.settings import HostSettings

from ..support import drop_namespace

__all__ = ["OWNER", "answer", "ask", "drop_namespace", "grant", "invoke_grant", "make_host",
           "put", "read_file_handler", "send_grant", "tool"]

OWNER = human("olivia")
Script = Callable[[TurnRequest, RuntimeHost], Awaitable[JsonValue]]


def tool(name: str, namespace: str, path: tuple[str, ...], action: str = "read") -> ToolDefinition:
    return ToolDefinition(
        name=name, description=f"{name} tool", namespace=namespace, source="native",
        read_write="read", input_schema={"type": "object"},
        required_capability=CapabilityRequirement(
            resource=ResourceRef(namespace=namespace, path=path), action=action))


def grant(ns: str, subject: str, namespace: str, path: tuple[str, ...], action: str,
          *, grant_id: str | None = None, **constraints: Any) -> CapabilityGrant:
    issued = datetime.now(UTC) - timedelta(seconds=5)
    return CapabilityGrant(
        id=grant_id or f"{subject}-{namespace}-{'-'.join(path)}-{action}", namespace_id=ns,
        subject=agent(subject), issuer=OWNER,
        capabilities=(Capability(resource=ResourceRef(namespace=namespace, path=path),
                                 actions=(action,), scope="exact"),),
        constraints=CapabilityConstraints(**constraints), issued_at=format_timestamp(issued))


def send_grant(ns: str, sender: str, recipient: str, **constraints: Any) -> CapabilityGrant:
    return grant(ns, sender, "sharedos.messaging", ("agent", recipient), "send", **constraints)


def invoke_grant(ns: str, who: str) -> CapabilityGrant:
    return grant(ns, who, "sharedos.execution", ("agent", who), "invoke")


def ask(recipient: str, payload: JsonValue) -> Script:
    """A script that asks ``recipient`` and returns the tool result's wire form."""

    async def script(turn: TurnRequest, host: RuntimeHost) -> JsonValue:
        result = await host.call("messages.request", {
            "recipient": {"kind": "agent", "agentId": recipient}, "payload": payload})
        return result.to_wire()

    return script


def answer(payload: JsonValue) -> Script:
    async def script(turn: TurnRequest, host: RuntimeHost) -> JsonValue:
        return payload

    return script


def make_host(redis: Redis, ns: str, scripts: Mapping[str, Script], *,
              tool_namespaces: tuple[str, ...] = ("messages", "files"), **settings: Any
              ) -> MessagingHost:
    values: dict[str, Any] = {"request_timeout_s": 10, "turn_timeout_s": 8, "lease_s": 5,
                              "reconcile_interval_s": 0.2}
    values.update(settings)
    agents = {name: AgentSpec(ScriptedRuntime(script), authority=OWNER, owner=OWNER,
                              tool_namespaces=tool_namespaces)
              for name, script in scripts.items()}
    return MessagingHost(redis, namespace=ns, agents=agents, settings=HostSettings(**values))


async def put(host: MessagingHost, *grants: CapabilityGrant) -> None:
    for g in grants:
        await host.grant_store.put(g)


async def read_file_handler(context: AccessContext, call: ToolCall) -> JsonValue:
    return {"text": f"read by {context.actor.id}"}


class Clock:
    """A settable clock for the marker scripts: deadlines and leases pass without sleeping."""

    def __init__(self) -> None:
        self.offset_ms = 0

    def __call__(self) -> int:
        return int(time.time() * 1000) + self.offset_ms
