"""RedisGrantUsageStore: exactly maxUses spent under concurrency across connections."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import anyio
import pytest
from redis.asyncio import Redis

from sharedos_redis.errors import ConfigurationError, StoreUnavailable
from sharedos_redis.kernel.ports import GrantUsageStore
from sharedos_redis.store.usage import RedisGrantUsageStore

from .store_support import drop_namespace

pytestmark = pytest.mark.anyio


async def test_hundred_concurrent_consumers_on_two_connections_get_exactly_max(
    redis_factory: Callable[[], Awaitable[Redis]], ns: str
) -> None:
    stores: list[GrantUsageStore] = [RedisGrantUsageStore(await redis_factory()) for _ in range(2)]
    won: list[bool] = []

    async def consume(i: int) -> None:
        won.append(await stores[i % 2].consume(ns, "g-1", 10))

    try:
        async with anyio.create_task_group() as tg:
            for i in range(100):
                tg.start_soon(consume, i)
        assert won.count(True) == 10
        assert await stores[0].used(ns, "g-1") == 10
        assert await stores[1].used(ns, "g-other") == 0
        assert not await stores[1].consume(ns, "g-1", 10)
        assert await stores[1].consume(ns, "g-1", 11)  # a larger maxUses (a new grant version)
    finally:
        await drop_namespace(await redis_factory(), ns)


async def test_counters_are_per_namespace(redis: Redis, ns: str) -> None:
    store = RedisGrantUsageStore(redis)
    try:
        assert await store.consume(ns, "g-1", 1)
        assert await store.consume(f"{ns}}}:x", "g-1", 1)
        assert not await store.consume(ns, "g-1", 1)
    finally:
        await drop_namespace(redis, ns)
        await drop_namespace(redis, f"{ns}}}:x")


@pytest.mark.parametrize("bad", [0, -1, True, 1.5])
async def test_bad_max_uses_is_misuse(redis: Redis, ns: str, bad: object) -> None:
    with pytest.raises(ConfigurationError):
        await RedisGrantUsageStore(redis).consume(ns, "g-1", bad)  # type: ignore[arg-type]


async def test_unreachable_redis_raises_store_unavailable(ns: str) -> None:
    dead = Redis(host="127.0.0.1", port=1, socket_connect_timeout=0.5)
    try:
        with pytest.raises(StoreUnavailable):
            await RedisGrantUsageStore(dead).consume(ns, "g-1", 1)
        with pytest.raises(StoreUnavailable):
            await RedisGrantUsageStore(dead).used(ns, "g-1")
    finally:
        await dead.aclose()
