"""TraceBudget: the host/human API over per-trace hops."""

from __future__ import annotations

import pytest
from redis.asyncio import Redis

from sharedos_redis.errors import ConfigurationError
from sharedos_redis.store.budget import TraceBudget
from sharedos_redis.store.keys import Keys

from .store_support import drop_namespace, namespace_keys

pytestmark = pytest.mark.anyio


async def test_set_start_and_get(redis: Redis, ns: str) -> None:
    budget = TraceBudget(redis, default_hops=4, ttl_s=60)
    try:
        assert await budget.get(ns, "t-1") is None
        assert await budget.start(ns, "t-1")
        assert await budget.get(ns, "t-1") == 4
        assert not await budget.start(ns, "t-1", 100)  # a running trace is not reset
        assert await budget.get(ns, "t-1") == 4
        await budget.set(ns, "t-1", 0)
        assert await budget.get(ns, "t-1") == 0
        await budget.set(ns, "t-1", 9)
        assert await budget.get(ns, "t-1") == 9
        assert 0 < await redis.pttl(Keys(ns).budget("t-1")) <= 60_000
        assert await budget.get(ns, "t-2") is None
        assert await namespace_keys(redis, ns) == {Keys(ns).budget("t-1")}
    finally:
        await drop_namespace(redis, ns)


@pytest.mark.parametrize("bad", [-1, True, 2.0])
async def test_bad_hops_are_misuse(redis: Redis, ns: str, bad: object) -> None:
    with pytest.raises(ConfigurationError):
        await TraceBudget(redis).set(ns, "t-1", bad)  # type: ignore[arg-type]
    assert await namespace_keys(redis, ns) == set()
