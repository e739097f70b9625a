"""create_redis: one bounded, blocking pool per client, bytes responses."""

from __future__ import annotations

import os

import pytest
from redis.asyncio import BlockingConnectionPool

from sharedos_redis.store.client import RedisSettings, create_redis

pytestmark = pytest.mark.anyio


async def test_client_uses_a_bounded_blocking_pool() -> None:
    settings = RedisSettings.from_url("redis://127.0.0.1:1/3", max_connections=5,
                                      socket_timeout_s=2.5)
    client = create_redis(settings)
    try:
        pool = client.connection_pool
        assert isinstance(pool, BlockingConnectionPool)
        assert pool.max_connections == 5
        assert pool.connection_kwargs["socket_timeout"] == 2.5
        assert pool.connection_kwargs["db"] == 3
        assert not pool.connection_kwargs.get("decode_responses", False)
    finally:
        await client.aclose()


def test_settings_reject_nonsense() -> None:
    with pytest.raises(ValueError):
        RedisSettings(max_connections=0)
    assert RedisSettings().max_connections == 8


@pytest.mark.real_redis
async def test_client_reaches_a_real_server() -> None:
    url = os.environ.get("REDIS_URL") or pytest.skip("REDIS_URL is not set")
    client = create_redis(RedisSettings.from_url(url, max_connections=2))
    try:
        assert await client.ping()
    finally:
        await client.aclose()
