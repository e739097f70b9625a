import pytest
from redis.asyncio import Redis

pytestmark = pytest.mark.anyio


async def test_redis_fixture_reaches_its_backend(redis: Redis, ns: str) -> None:
    key = f"sos:{{{ns}}}:smoke"
    await redis.set(key, "1", px=10_000)
    assert await redis.get(key) == b"1"
    await redis.delete(key)
