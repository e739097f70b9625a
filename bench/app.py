"""The benchmark's host: ``sharedos-redis worker --app bench.app:host``.

Two agents: ``requester`` (its turns are never run; the benchmark calls
``messages.request`` in its context directly) and ``echo``, a no-op recipient.
The worker process reads SHAREDOS_REDIS_URL and SHAREDOS_NAMESPACE.
"""

from __future__ import annotations

import os
from datetime import UTC, datetime, timedelta

from redis.asyncio import Redis

from sharedos_redis.kernel.contracts import (
    Capability,
    CapabilityConstraints,
    CapabilityGrant,
    JsonValue,
    ResourceRef,
    format_timestamp,
    human,
)
from sharedos_redis.kernel.contracts import agent as agent_address
from sharedos_redis.kernel.turn import RuntimeHost, TurnRequest
from sharedos_redis.store.client import RedisSettings, create_pool, create_redis
from sharedos_redis.worker.host import AgentSpec, MessagingHost
from sharedos_redis.worker.settings import HostSettings

__all__ = ["OWNER", "RECIPIENT", "REQUESTER", "build", "grants", "host", "named_client"]

OWNER = human("bench-owner")
REQUESTER, RECIPIENT = "requester", "echo"


class _Noop:
    async def run(self, turn: TurnRequest, host: RuntimeHost) -> JsonValue:
        return {}


def build(redis: Redis, namespace: str, *, url: str | None = None,
          settings: HostSettings | None = None) -> MessagingHost:
    """The benchmark host on ``redis`` (default ``HostSettings``: poll 5 ms, 32 jobs)."""
    agents = {name: AgentSpec(_Noop(), authority=OWNER, owner=OWNER)
              for name in (REQUESTER, RECIPIENT)}
    return MessagingHost(redis, namespace=namespace, agents=agents,
                         connection=RedisSettings.from_url(url) if url else None,
                         settings=settings or HostSettings())


def _grant(ns: str, subject: str, namespace: str, target: str, action: str) -> CapabilityGrant:
    return CapabilityGrant(
        id=f"bench-{subject}-{action}", namespace_id=ns, subject=agent_address(subject),
        issuer=OWNER,
        capabilities=(Capability(resource=ResourceRef(namespace=namespace,
                                                      path=("agent", target)),
                                 actions=(action,), scope="exact"),),
        constraints=CapabilityConstraints(),
        issued_at=format_timestamp(datetime.now(UTC) - timedelta(seconds=5)))


def grants(namespace: str) -> tuple[CapabilityGrant, ...]:
    """requester may send to echo (no maxUses); echo may have its turn invoked."""
    return (_grant(namespace, REQUESTER, "sharedos.messaging", RECIPIENT, "send"),
            _grant(namespace, RECIPIENT, "sharedos.execution", RECIPIENT, "invoke"))


def named_client(url: str, name: str, *, max_connections: int | None = None) -> Redis:
    """Like ``create_redis`` (same bounded pool) but every connection named ``name``,
    so ``CLIENT LIST`` can count this process's connections."""
    s = RedisSettings(url=url) if max_connections is None else RedisSettings(
        url=url, max_connections=max_connections)
    pool = create_pool(s)
    pool.connection_kwargs["client_name"] = name
    return Redis.from_pool(pool)


def host() -> MessagingHost:
    """The worker process's host, from SHAREDOS_REDIS_URL and SHAREDOS_NAMESPACE
    (BENCH_OTEL=1: with the OpenTelemetry SDK on, see ``bench.otel``)."""
    if os.environ.get("BENCH_OTEL") == "1":
        from .otel import install_sdk

        install_sdk()
    url = os.environ["SHAREDOS_REDIS_URL"]
    return build(create_redis(RedisSettings(url=url)), os.environ["SHAREDOS_NAMESPACE"], url=url)

