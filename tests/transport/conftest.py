"""Helpers for transport tests: trusted contexts, envelopes and the namespace's keyspace."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest
from redis.asyncio import Redis

from sharedos_redis.kernel.contracts import (
    AccessContext,
    Address,
    MessageEnvelope,
    agent,
    format_timestamp,
)
from sharedos_redis.store.keys import Keys, encode_id

Keyspace = Callable[[], Awaitable[set[str]]]


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


@pytest.fixture
async def keyspace(redis: Redis, ns: str) -> AsyncIterator[Keyspace]:
    """``await keyspace()`` lists the test namespace's keys; all are deleted afterwards."""

    async def current() -> set[str]:
        return await scan_keyspace(redis, ns)

    yield current
    leftover = await current()
    if leftover:
        await redis.delete(*leftover)


@pytest.fixture
def keys(ns: str) -> Keys:
    return Keys(ns)
