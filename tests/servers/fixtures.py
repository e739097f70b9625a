"""pytest fixtures for private Redis servers (registered for every test in tests/conftest.py).

Every fixture skips when no ``redis-server`` binary is on PATH, and stops what it
started at teardown, also when the test failed.
"""

from __future__ import annotations

import tempfile
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest

from ._process import require_redis_server
from .cluster import LocalCluster
from .redis_server import RedisServer
from .sentinel import SentinelCluster
from .tls import TlsMaterial, make_tls_material

__all__ = ["ServerPool", "local_cluster", "redis_server", "sentinel_cluster", "servers",
           "tls_material", "tls_redis_server"]


class ServerPool:
    """Starts servers for one test and remembers them; :meth:`cleanup` kills them all."""

    def __init__(self) -> None:
        self.started: list[RedisServer | SentinelCluster] = []

    async def redis(self, **options: Any) -> RedisServer:
        """Start a :class:`RedisServer` (keyword options as its constructor)."""
        server = RedisServer(**options)
        self.started.append(server)
        await server.start()
        return server

    async def sentinel(self, **options: Any) -> SentinelCluster:
        """Start a :class:`SentinelCluster` (keyword options as its constructor)."""
        cluster = SentinelCluster(**options)
        self.started.append(cluster)
        await cluster.start()
        return cluster

    def cleanup(self) -> None:
        """SIGKILL every process started here and delete their directories."""
        for item in reversed(self.started):
            item.cleanup()


@pytest.fixture(scope="session")
def tls_material() -> Iterator[TlsMaterial]:
    """A private CA with server (127.0.0.1/localhost), wrong-host and client certificates."""
    with tempfile.TemporaryDirectory(prefix="sos-tls-") as directory:
        yield make_tls_material(Path(directory))


@pytest.fixture
async def servers() -> AsyncIterator[ServerPool]:
    """A pool: ``await servers.redis(persistent=True)``, ``await servers.sentinel()``."""
    require_redis_server()
    pool = ServerPool()
    try:
        yield pool
    finally:
        pool.cleanup()


@pytest.fixture
async def redis_server(servers: ServerPool) -> RedisServer:
    """A started plain ``redis-server`` (no persistence) on a free loopback port."""
    return await servers.redis()


@pytest.fixture
async def tls_redis_server(servers: ServerPool, tls_material: TlsMaterial) -> RedisServer:
    """A started TLS-only ``redis-server`` with a certificate for 127.0.0.1/localhost."""
    return await servers.redis(tls=tls_material)


@pytest.fixture
async def sentinel_cluster(servers: ServerPool) -> SentinelCluster:
    """A started primary, replica and 3 sentinels (``master_name`` ``mymaster``)."""
    return await servers.sentinel()


@pytest.fixture(scope="session")
def local_cluster() -> Iterator[LocalCluster]:
    """A private 3-primary Redis Cluster on loopback ports, shared by the session."""
    if not LocalCluster.available():
        pytest.skip("no redis-server/redis-cli binaries")
    cluster = LocalCluster(primaries=3).start()
    try:
        yield cluster
    finally:
        cluster.stop()
