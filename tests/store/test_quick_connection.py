"""The quick checkout, probe and write of store/connection.py keep redis-py's guards.

Real Redis only (fakeredis has its own connection class): a private server per test,
so the stray-data and outage cases cannot disturb anyone else.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import anyio
import pytest
from redis.asyncio import Connection, Redis
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import DataError
from redis.exceptions import TimeoutError as RedisTimeoutError

from sharedos_redis.store.client import RedisSettings, create_pool, create_redis
from sharedos_redis.store.connection import QuickCheckoutPool, quick_connection_class

from ..servers.redis_server import RedisServer

pytestmark = [pytest.mark.anyio]


@pytest.fixture
async def client(redis_server: RedisServer) -> AsyncIterator[Redis]:
    redis = create_redis(RedisSettings.from_url(redis_server.url, max_connections=2,
                                                pool_timeout_s=5))
    yield redis
    await redis.aclose()


async def _commands(redis: Redis, name: str) -> int:
    stats = await redis.info("commandstats")
    return int(stats.get(f"cmdstat_{name}", {}).get("calls", 0))


async def test_factory_pools_are_quick(client: Redis) -> None:
    assert isinstance(client.connection_pool, QuickCheckoutPool)
    assert client.connection_pool.connection_class.__name__.startswith("_Quick")


async def test_a_connection_returned_with_unread_data_is_replaced(client: Redis) -> None:
    """redis-py's desync guard still holds: a stale reply is never read as the answer."""
    await client.set("k", "right")
    pool = client.connection_pool
    connection = await pool.get_connection()
    connection._reader.feed_data(b"$5\r\nstale\r\n")  # type: ignore[attr-defined]  # unread
    await pool.release(connection)
    assert await client.get("k") == b"right"
    assert await client.echo("fresh") == b"fresh"


async def test_many_callers_share_two_connections(client: Redis) -> None:
    """Callers that must wait queue on the pool; each gets its own answer, none times out."""
    results: dict[int, bytes] = {}

    async def caller(index: int) -> None:
        for round_ in range(20):
            results[index] = await client.echo(f"{index}:{round_}")

    with anyio.fail_after(20):
        async with anyio.create_task_group() as tg:
            for index in range(50):
                tg.start_soon(caller, index)
    assert results == {index: f"{index}:19".encode() for index in range(50)}
    assert len(client.connection_pool._in_use_connections) == 0  # type: ignore[attr-defined]


async def test_a_write_beyond_the_buffer_drains_and_arrives(client: Redis) -> None:
    value = b"x" * (4 * 1024 * 1024)
    await client.set("big", value)
    assert await client.strlen("big") == len(value)


async def test_a_due_health_check_still_pings(redis_server: RedisServer) -> None:
    redis = create_redis(RedisSettings.from_url(redis_server.url, health_check_interval_s=1))
    try:
        await redis.get("k")
        pings = await _commands(redis, "ping")
        connection = redis.connection_pool._available_connections[0]  # type: ignore[attr-defined]
        connection.next_health_check = 0  # due now
        await redis.get("k")
        assert await _commands(redis, "ping") == pings + 1
    finally:
        await redis.aclose()


async def test_a_killed_server_is_a_typed_error_not_a_hang(redis_server: RedisServer) -> None:
    redis = create_redis(RedisSettings.from_url(redis_server.url, socket_timeout_s=2))
    try:
        assert await redis.ping()
        redis_server.kill()
        with anyio.fail_after(10), pytest.raises((RedisConnectionError, RedisTimeoutError)):
            for _ in range(3):  # the first write may still land in the socket buffer
                await redis.set("k", "v")
    finally:
        await redis.aclose()


async def test_blocking_pool_timeout_still_applies(redis_server: RedisServer) -> None:
    pool = create_pool(RedisSettings.from_url(redis_server.url, max_connections=1,
                                              pool_timeout_s=0.2))
    held = await pool.get_connection()
    try:
        with anyio.fail_after(5), pytest.raises(RedisConnectionError):
            await pool.get_connection()
    finally:
        await pool.release(held)
        await pool.disconnect()


@pytest.mark.parametrize("args", [
    ("SET", "k", 1.5), ("CONFIG GET", "maxmemory"), (b"CLIENT SETNAME", b"n"),
    ("SET", b"k", memoryview(b"view")), ("EVALSHA", "f" * 40, 2, "a", "b", "h\u00e9", -7, 2**70),
])
def test_commands_are_packed_byte_for_byte_as_redis_py_packs_them(args: tuple[object, ...]
                                                                   ) -> None:
    quick = quick_connection_class(Connection)()
    assert b"".join(quick.pack_command(*args)) == b"".join(Connection().pack_command(*args))


def test_an_argument_redis_py_refuses_is_still_refused() -> None:
    with pytest.raises(DataError):
        quick_connection_class(Connection)().pack_command("SET", "k", True)


async def test_unicode_and_numbers_arrive_as_sent(client: Redis) -> None:
    await client.hset("h", mapping={"text": "h\u00e9 \u2603", "int": 2**70, "float": 0.1 + 0.2})
    assert await client.hmget("h", ["text", "int", "float"]) == [
        "h\u00e9 \u2603".encode(), str(2**70).encode(), repr(0.1 + 0.2).encode()]
