"""Plain helpers shared by Redis tests: trusted contexts, envelopes, keyspace scans."""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from typing import Any

import anyio
from redis.asyncio import Redis

from sharedos_redis.errors import StoreUnavailable
from sharedos_redis.kernel.contracts import (
    AccessContext,
    Address,
    MessageEnvelope,
    agent,
    format_timestamp,
)
from sharedos_redis.store.directory import AgentDirectory
from sharedos_redis.store.keys import encode_id

Keyspace = Callable[[], Awaitable[set[str]]]


SERVED_AGENTS = ("alice", "bob", "carol")
"""The agents :func:`serve` (and the ``served`` fixture) give a route lease by default."""


async def serve(redis: Redis, ns: str, *agents: str, lease_s: float = 3600) -> None:
    """Give ``agents`` (default :data:`SERVED_AGENTS`) a live route lease in ``ns``, as a
    running worker does: tests that accept requests with no worker running need it."""
    await AgentDirectory(redis).register(ns, agents or SERVED_AGENTS, lease_s)


def make_context(ns: str, actor: Address | None = None, *, trace: str = "trace-1",
                 purpose: str = "atlas-status") -> AccessContext:
    return AccessContext(namespace_id=ns, actor=actor or agent("bob"), authority=agent("host"),
                         owner=agent("owner"), purpose=purpose, trace_id=trace,
                         enabled_tool_namespaces=("messages",), now=format_timestamp())


def make_envelope(context: AccessContext, receiver: Address | None = None, *,
                  id: str = "m-1", payload: Any = None) -> MessageEnvelope:
    return MessageEnvelope(id=id, sender=context.actor, receiver=receiver or agent("alice"),
                           purpose=context.purpose, trace_id=context.trace_id,
                           payload={"question": "Atlas status?"} if payload is None else payload,
                           created_at=context.now)


async def scan_keyspace(redis: Redis, ns: str) -> set[str]:
    pattern = f"sos:{{{encode_id(ns)}}}:*"
    return {key.decode() async for key in redis.scan_iter(match=pattern, count=1000)}


async def drop_namespace(redis: Redis, ns: str) -> None:
    """Delete every key of ``ns`` (SCAN on the namespace's own prefix only)."""
    keys = await scan_keyspace(redis, ns)
    if keys:
        await redis.delete(*keys)


def now_ms() -> int:
    return int(time.time() * 1000)


async def eventually(check: Callable[[], Awaitable[bool]], timeout_s: float = 10,
                     every_s: float = 0.02) -> None:
    """Wait until ``check()`` holds (for state with no event to wait on), or fail."""
    with anyio.fail_after(timeout_s):
        while True:
            if await check():
                return
            await anyio.sleep(every_s)


async def wait_served(redis: Redis, ns: str, *agents: str, timeout_s: float = 30) -> None:
    """Wait until every one of ``agents`` holds a live route lease in ``ns``: a worker
    process started for them is up (requests to them are accepted from then on)."""
    directory = AgentDirectory(redis)

    async def live() -> bool:
        try:
            expiries = [await directory.expiry(ns, agent_id) for agent_id in agents]
        except StoreUnavailable:
            return False
        return all(e is not None and e > now_ms() for e in expiries)

    await eventually(live, timeout_s=timeout_s, every_s=0.05)
