"""Shared fixtures: the anyio backend and one Redis fixture over fakeredis and real Redis.

Every Redis test gets a fresh namespace (``ns``) and must delete what it
creates; nothing here ever runs FLUSHALL/FLUSHDB on a shared server.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable

import fakeredis
import pytest
from redis.asyncio import Redis

from sharedos_redis.store.keys import Keys

from .support import Keyspace, drop_namespace, scan_keyspace, serve

# private redis-server fixtures: servers, redis_server, tls_redis_server, sentinel_cluster,
# local_cluster
pytest_plugins = ["tests.servers.fixtures"]

RedisFactory = Callable[[], Awaitable[Redis]]


@pytest.fixture
def anyio_backend() -> str:
    # redis-py's asyncio client and arq need asyncio.
    return "asyncio"


@pytest.fixture
def ns() -> str:
    """A namespace no other test (or process) uses."""
    return f"t-{uuid.uuid4().hex[:12]}"


@pytest.fixture(params=["fake", pytest.param("real", marks=pytest.mark.real_redis)])
async def redis_factory(request: pytest.FixtureRequest) -> AsyncIterator[RedisFactory]:
    """Make clients that share one backend: one FakeServer, or the server at REDIS_URL.

    Clients use ``decode_responses=False`` like arq's pool; code must decode itself.
    """
    clients: list[Redis] = []
    if request.param == "fake":
        server = fakeredis.FakeServer()

        async def make() -> Redis:
            client: Redis = fakeredis.FakeAsyncRedis(server=server)
            clients.append(client)
            return client
    else:
        url = os.environ.get("REDIS_URL")
        if not url:
            pytest.skip("REDIS_URL is not set")

        async def make() -> Redis:
            client = Redis.from_url(url)
            clients.append(client)
            return client

    yield make
    for client in clients:
        await client.aclose()


@pytest.fixture
async def redis(redis_factory: RedisFactory) -> Redis:
    """One client on the parametrised backend."""
    return await redis_factory()


@pytest.fixture
async def cleanup(redis: Redis, ns: str) -> AsyncIterator[None]:
    """Drop the test's namespace from the backend afterwards (never FLUSHALL)."""
    yield
    await drop_namespace(redis, ns)


@pytest.fixture
def backend(redis_factory: RedisFactory, request: pytest.FixtureRequest) -> str:
    """``"fake"`` or ``"real"``: which backend this test runs on."""
    return "real" if "real" in request.node.callspec.id.split("-") else "fake"


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
async def served(redis: Redis, ns: str) -> AsyncIterator[None]:
    """alice, bob and carol hold a live route lease in ``ns`` (as if a worker served
    them), for tests that accept requests without running a worker; removed afterwards."""
    await serve(redis, ns)
    yield
    await redis.delete(Keys(ns).agents)


@pytest.fixture
def keys(ns: str) -> Keys:
    """The key schema of the test namespace."""
    return Keys(ns)


@pytest.fixture
def url() -> str:
    """The real Redis at REDIS_URL, for tests that start processes (skipped without it)."""
    value = os.environ.get("REDIS_URL")
    if not value:
        pytest.skip("REDIS_URL is not set: this test needs a real Redis server")
    return value


@pytest.fixture(params=["single", pytest.param("cluster", marks=pytest.mark.cluster)])
def deployment_url(request: pytest.FixtureRequest) -> str:
    """The real Redis at REDIS_URL, then the local 3-primary cluster: the same test on both."""
    if request.param == "cluster":
        return str(request.getfixturevalue("local_cluster").url)
    value = os.environ.get("REDIS_URL")
    if not value:
        pytest.skip("REDIS_URL is not set: this test needs a real Redis server")
    return value
