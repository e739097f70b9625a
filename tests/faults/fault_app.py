"""The host of the fault suite's worker and requester processes.

``--app tests.faults.fault_app:host``. Configured by environment:
SHAREDOS_REDIS_URL, SHAREDOS_NAMESPACE, FAULT_TURN_DELAY_S (how long each echo turn
takes; default 0), FAULT_AGENTS (how many echo agents
``a00``..; default 1). Agents: ``req`` (the requester; it never runs a turn
here) and ``alice``, ``carol`` plus ``a00``.. — each answers at once with
``{"echo": payload, "by": <agent>, "attempt": n}``; a payload ``{"via": <agent>, ...}``
makes the turn first ask that agent for the rest of the payload (a nested request) and
add ``"nested"``: the tool result's output, or its error. Short lease, claim and
reconcile settings make re-runs come within seconds.
"""

from __future__ import annotations

import os
from typing import Any

import anyio
from redis.asyncio import Redis

from sharedos_redis.kernel.contracts import JsonValue
from sharedos_redis.kernel.scripted import ScriptedRuntime
from sharedos_redis.kernel.turn import RuntimeHost, TurnRequest
from sharedos_redis.store.client import RedisSettings, create_redis
from sharedos_redis.worker.host import AgentSpec, MessagingHost
from sharedos_redis.worker.settings import HostSettings
from tests.worker.helpers import OWNER, invoke_grant, put, send_grant

__all__ = ["FAST", "NESTED", "PURPOSE", "REQUESTER", "agent_names", "build", "grant_all",
           "host"]

REQUESTER = "req"
NESTED = "carol"
"""The agent nested requests go to (``{"via": "carol", ...}``)."""
PURPOSE = "fault-suite"
FAST: dict[str, Any] = {"request_timeout_s": 20, "turn_timeout_s": 5, "lease_s": 1,
                        "claim_idle_s": 1, "reconcile_interval_s": 0.2, "max_attempts": 5,
                        # keep every audit record: the load test counts reply.settled events
                        "audit_maxlen": 2_000_000}


def agent_names(count: int) -> list[str]:
    """``alice`` plus ``count`` numbered echo agents."""
    return ["alice", *(f"a{i:02d}" for i in range(count))]


async def _echo(turn: TurnRequest, host: RuntimeHost) -> JsonValue:
    await anyio.sleep(float(os.environ.get("FAULT_TURN_DELAY_S", "0")))
    payload = turn.message.payload
    answer: dict[str, JsonValue] = {"echo": payload, "by": turn.agent.agent_id,
                                    "attempt": turn.attempt}
    if isinstance(payload, dict) and isinstance(via := payload.get("via"), str):
        rest = {key: value for key, value in payload.items() if key != "via"}
        result = await host.call("messages.request", {
            "recipient": {"kind": "agent", "agentId": via}, "payload": rest})
        wire = result.to_wire()
        answer["nested"] = wire.get("output") if result.status == "succeeded" else wire
    return answer


async def _idle(turn: TurnRequest, host: RuntimeHost) -> JsonValue:
    return None


def build(redis: Redis, ns: str, *, url: str | None = None, agents: int = 1,
          **settings: Any) -> MessagingHost:
    """A host with the requester and the echo agents on ``redis``."""
    values = dict(FAST, **settings)
    specs = {name: AgentSpec(ScriptedRuntime(_echo), authority=OWNER, owner=OWNER)
             for name in [*agent_names(agents), NESTED]}
    specs[REQUESTER] = AgentSpec(ScriptedRuntime(_idle), authority=OWNER, owner=OWNER)
    return MessagingHost(redis, namespace=ns, agents=specs, settings=HostSettings(**values),
                         connection=RedisSettings.from_url(url) if url else None)


async def grant_all(host: MessagingHost, senders: list[str], recipients: list[str]) -> None:
    """Send grants sender → recipient for every pair, invoke grants for every recipient."""
    ns = host.namespace
    grants = [send_grant(ns, s, r) for s in senders for r in recipients if s != r]
    await put(host, *grants, *(invoke_grant(ns, r) for r in recipients))


def host() -> MessagingHost:
    """The worker's host (``--app tests.faults.fault_app:host``)."""
    url = os.environ["SHAREDOS_REDIS_URL"]
    return build(create_redis(RedisSettings(url=url)), os.environ["SHAREDOS_NAMESPACE"],
                 url=url, agents=int(os.environ.get("FAULT_AGENTS", "1")))
