"""Fixtures for router tests: the namespace keyspace, deleted after each test."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from redis.asyncio import Redis

from .router_support import Keyspace, scan_keyspace


@pytest.fixture
async def keyspace(redis: Redis, ns: str) -> AsyncIterator[Keyspace]:
    """``await keyspace()`` lists the test namespace's keys; all are deleted afterwards."""

    async def current() -> set[str]:
        return await scan_keyspace(redis, ns)

    yield current
    leftover = await current()
    if leftover:
        await redis.delete(*leftover)
