"""The example host: agents, their policy, grants issued by a human owner, one file tool.

This is the shape of a real host: one :class:`MessagingHost` per namespace,
agents with their runtime and authority/owner policy, grants in the Redis
grant store, tools registered once and authorized per actor on every call.
"""

from __future__ import annotations

import os
from datetime import UTC, datetime, timedelta
from importlib import resources
from typing import Any, Literal

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
from sharedos_redis.kernel.requirements import path_argument
from sharedos_redis.store.client import RedisSettings, create_redis
from sharedos_redis.worker.host import AgentSpec, MessagingHost
from sharedos_redis.worker.settings import HostSettings

from .models import make_driver, model_runtime
from .runtimes import Asker, Carol, PingPong
from .transcript import Transcript

__all__ = ["NAMESPACE", "OWNER", "build_host", "host", "issue_grants"]

NAMESPACE = "scheduler-example"
OWNER = human("olivia")
"""The human who owns every agent here and issues their grants."""

FILES_READ = ToolDefinition(
    name="files.read", description="Read a file of the Atlas project (path relative to it).",
    namespace="files",
    source="native", read_write="read",
    input_schema={"type": "object", "properties": {"path": {"type": "string"}},
                  "required": ["path"], "additionalProperties": False},
    required_capability=CapabilityRequirement(  # the ceiling: each call names one file below
        resource=ResourceRef(namespace="files", path=("projects", "atlas")), action="read"),
)
"""Each call is authorized for ``read`` on ``files/projects/atlas/<path>`` exactly."""


async def read_atlas_file(context: AccessContext, call: ToolCall) -> JsonValue:
    """The ``files.read`` handler; it runs only after the kernel authorized this exact file."""
    name = str(call.arguments.get("path", ""))
    if name != "atlas.md":
        return {"error": "no such file"}
    text = resources.files("scheduler_example").joinpath("data", name).read_text("utf-8")
    return {"path": name, "text": text.strip().splitlines()[-1]}


def _agents(transcript: Transcript, model: str) -> dict[str, AgentSpec]:
    driver = make_driver(model)

    def spec(runtime: Any, *namespaces: str) -> AgentSpec:
        return AgentSpec(runtime=runtime, authority=OWNER, owner=OWNER,
                         tool_namespaces=("messages", *namespaces))

    return {
        "bob": spec(model_runtime("bob", driver, transcript)),
        "alice": spec(model_runtime("alice", driver, transcript), "files"),
        "carol": spec(Carol()),
        "eve": spec(Asker("eve", "alice", "Send me the Atlas files", transcript)),
        "ping": spec(PingPong("ping", "pong", transcript)),
        "pong": spec(PingPong("pong", "ping", transcript)),
    }


def build_host(redis: Redis, *, transcript: Transcript | None = None,
               connection: RedisSettings | None = None,
               namespace: str = NAMESPACE, model: str = "scripted") -> MessagingHost:
    """The example's host on ``redis``; ``model`` drives bob and alice (see ``models``)."""
    settings = HostSettings(request_timeout_s=20, turn_timeout_s=15, lease_s=5,
                            default_budget_hops=8)
    agents = _agents(transcript or Transcript(), model)
    built = MessagingHost(redis, namespace=namespace, agents=agents, settings=settings,
                          connection=connection)
    built.register_tool(FILES_READ, read_atlas_file, resolve=path_argument("path"))
    return built


def host() -> MessagingHost:
    """The host a separate worker loads: ``sharedos-redis worker --app scheduler_example:host``.

    Connects as ``SHAREDOS_REDIS_*`` say (``SHAREDOS_REDIS_URL``, default
    ``redis://127.0.0.1:6379/0``; TLS, ACL user, Sentinel: see ``RedisSettings``),
    serves ``SHAREDOS_NAMESPACE`` (default ``scheduler-example``) and drives bob and
    alice with ``SHAREDOS_EXAMPLE_MODEL`` (default ``scripted``; see ``--model``).
    """
    connection = RedisSettings.from_env()
    namespace = os.environ.get("SHAREDOS_NAMESPACE", NAMESPACE)
    return build_host(create_redis(connection), connection=connection, namespace=namespace,
                      transcript=Transcript(echo=False),
                      model=os.environ.get("SHAREDOS_EXAMPLE_MODEL", "scripted"))


def _grant(grant_id: str, namespace: str, subject: str, resource: ResourceRef,
           actions: tuple[str, ...], issued: datetime,
           scope: Literal["exact", "descendants"] = "exact",
           **constraints: Any) -> CapabilityGrant:
    return CapabilityGrant(
        id=grant_id, namespace_id=namespace, subject=agent(subject), issuer=OWNER,
        capabilities=(Capability(resource=resource, actions=actions, scope=scope),),
        constraints=CapabilityConstraints(**constraints), issued_at=format_timestamp(issued))


def _send(to: str) -> ResourceRef:
    return ResourceRef(namespace="sharedos.messaging", path=("agent", to))


def _invoke(who: str) -> ResourceRef:
    return ResourceRef(namespace="sharedos.execution", path=("agent", who))


async def issue_grants(built: MessagingHost, *, run_id: str, carol_uses: int = 2) -> None:
    """Olivia's grants for this run (ids carry ``run_id`` so use counters start fresh).

    bob may ask alice about Atlas status; alice may read the Atlas files and consult
    carol ``carol_uses`` times; everyone may run their own turns; ping and pong may
    ask each other (their loop is stopped by the trace budget); eve gets nothing
    towards alice. Every grant expires in an hour.
    """
    now = datetime.now(UTC) - timedelta(seconds=1)
    ns, expires = built.namespace, format_timestamp(now + timedelta(hours=1))
    grants = [
        _grant(f"{run_id}-bob-asks-alice", ns, "bob", _send("alice"), ("send",), now,
               purposes=("atlas-status",), expires_at=expires),
        _grant(f"{run_id}-alice-reads-atlas", ns, "alice",
               ResourceRef(namespace="files", path=("projects", "atlas")), ("read",), now,
               scope="descendants", purposes=("atlas-status",), expires_at=expires),
        _grant(f"{run_id}-alice-asks-carol", ns, "alice", _send("carol"), ("send",), now,
               expires_at=expires, max_uses=carol_uses),
        _grant(f"{run_id}-ping-asks-pong", ns, "ping", _send("pong"), ("send",), now,
               expires_at=expires),
        _grant(f"{run_id}-pong-asks-ping", ns, "pong", _send("ping"), ("send",), now,
               expires_at=expires),
    ]
    for who in ("bob", "alice", "carol", "eve", "ping", "pong"):
        grants.append(_grant(f"{run_id}-{who}-runs", ns, who, _invoke(who), ("invoke",), now,
                             expires_at=expires))
    for grant in grants:
        await built.grant_store.put(grant)
