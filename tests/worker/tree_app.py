"""A host for the cascade tests' worker processes: ``--app tests.worker.tree_app:host``.

bob asks alice, alice asks carol, carol signals that her turn started (LPUSH on
``signals_key``) and then works until she is stopped: when her turn is cancelled she
signals ``carol:stopped`` and lets the cancellation through. A long lease (30 s,
renewed every 10 s) shows that the stop comes from the settlement, not the renewal.
Configured by environment: SHAREDOS_REDIS_URL, SHAREDOS_NAMESPACE.
"""

from __future__ import annotations

import os

import anyio
from redis.asyncio import Redis

from sharedos_redis.kernel.contracts import JsonValue
from sharedos_redis.kernel.scripted import ScriptedRuntime
from sharedos_redis.kernel.turn import RuntimeHost, TurnRequest
from sharedos_redis.store.client import RedisSettings, create_redis
from sharedos_redis.worker.host import AgentSpec, MessagingHost
from sharedos_redis.worker.settings import HostSettings

from .helpers import OWNER, ask, invoke_grant, put, send_grant

LEASE_S = 30.0


def signals_key(ns: str) -> str:
    return f"test:{ns}:tree-signals"


def build(redis: Redis, ns: str, *, connection: RedisSettings | None = None) -> MessagingHost:
    async def carol(turn: TurnRequest, host: RuntimeHost) -> JsonValue:
        await redis.lpush(signals_key(ns), "carol:started")
        try:
            await anyio.sleep_forever()
        finally:
            with anyio.move_on_after(2, shield=True):
                await redis.lpush(signals_key(ns), "carol:stopped")
        return None  # pragma: no cover - never reached: she works until stopped

    def spec(script: object) -> AgentSpec:
        return AgentSpec(ScriptedRuntime(script), authority=OWNER,  # type: ignore[arg-type]
                         owner=OWNER, tool_namespaces=("messages",))

    settings = HostSettings(request_timeout_s=60, turn_timeout_s=45, lease_s=LEASE_S,
                            reconcile_interval_s=0.2, claim_idle_s=1)
    return MessagingHost(redis, namespace=ns, settings=settings, connection=connection,
                         agents={"bob": spec(ask("alice", {})), "alice": spec(ask("carol", {})),
                                 "carol": spec(carol)})


async def grant_all(host: MessagingHost) -> None:
    ns = host.namespace
    await put(host, send_grant(ns, "bob", "alice"), send_grant(ns, "alice", "carol"),
              *(invoke_grant(ns, who) for who in ("bob", "alice", "carol")))


def host() -> MessagingHost:
    connection = RedisSettings.from_env()
    return build(create_redis(connection), os.environ["SHAREDOS_NAMESPACE"],
                 connection=connection)
