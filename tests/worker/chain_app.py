"""A delegation chain c0 → c1 → … → c10 (``--app tests.worker.chain_app:host``).

Each ``c<i>`` asks ``c<i+1>`` and returns what it got back with its own id in front;
the last one answers. TEST_MAX_JOBS sets ``max_jobs``. Used to show that a turn
waiting for a nested reply does not hold a running slot.
"""

from __future__ import annotations

import os
from typing import Any

from redis.asyncio import Redis

from sharedos_redis.kernel.contracts import JsonValue
from sharedos_redis.kernel.scripted import ScriptedRuntime
from sharedos_redis.kernel.turn import RuntimeHost, TurnRequest
from sharedos_redis.store.client import RedisSettings, create_redis
from sharedos_redis.worker.host import AgentSpec, MessagingHost
from sharedos_redis.worker.settings import HostSettings

from .helpers import OWNER

DEPTH = 10


def agent_name(level: int) -> str:
    return f"c{level}"


def _runtime(level: int) -> ScriptedRuntime:
    async def run(turn: TurnRequest, host: RuntimeHost) -> JsonValue:
        if level == DEPTH:
            return [agent_name(level)]
        result = await host.call("messages.request", {
            "recipient": {"kind": "agent", "agentId": agent_name(level + 1)}, "payload": {}})
        if result.status != "succeeded":
            return {"failed_at": agent_name(level), "result": result.to_wire()}
        below = result.output
        return [agent_name(level), *below] if isinstance(below, list) else {"odd": below}

    return ScriptedRuntime(run)


def build(redis: Redis, ns: str, *, connection: RedisSettings | None = None,
          **settings: Any) -> MessagingHost:
    values: dict[str, Any] = {"request_timeout_s": 20, "turn_timeout_s": 15, "lease_s": 5,
                              "reconcile_interval_s": 0.2, "default_budget_hops": 32}
    values.update(settings)
    agents = {agent_name(i): AgentSpec(_runtime(i), authority=OWNER, owner=OWNER)
              for i in range(DEPTH + 1)}
    return MessagingHost(redis, namespace=ns, agents=agents, settings=HostSettings(**values),
                         connection=connection)


async def grant_chain(host: MessagingHost) -> None:
    await host.allow_turns(*(agent_name(i) for i in range(DEPTH + 1)))
    for i in range(DEPTH):
        await host.allow_requests(agent_name(i), agent_name(i + 1))


def host() -> MessagingHost:
    connection = RedisSettings.from_env()
    return build(create_redis(connection), os.environ["SHAREDOS_NAMESPACE"],
                 connection=connection, max_jobs=int(os.environ.get("TEST_MAX_JOBS", "2")),
                 max_in_flight=int(os.environ.get("TEST_MAX_IN_FLIGHT", "256")))
