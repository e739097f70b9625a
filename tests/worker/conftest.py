"""Where the deployment tests deploy: a private server, then the local cluster."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass

import pytest
from redis.asyncio import Redis

from sharedos_redis.store.client import RedisSettings, create_redis

from ..servers import RedisServer
from ..servers.cluster import LocalCluster, namespaces_on_distinct_nodes
from ..support import drop_namespace


@pytest.fixture
def server(redis_server: RedisServer) -> RedisServer:
    """The private ``redis-server`` the worker-process tests deploy on."""
    return redis_server


@pytest.fixture
async def client(server: RedisServer, ns: str) -> AsyncIterator[Redis]:
    """A client of ``server``; the test's namespace is dropped afterwards."""
    redis = Redis.from_url(server.url)
    yield redis
    await drop_namespace(redis, ns)
    await redis.aclose()


@dataclass
class Target:
    """The private ``server`` (the arq worker) or the session's local cluster (the
    stream worker)."""

    url: str
    cluster: LocalCluster | None

    def namespaces(self, count: int) -> list[str]:
        """Fresh namespaces; on the cluster, on ``count`` different primaries."""
        prefix = f"d-{uuid.uuid4().hex[:8]}"
        if self.cluster is None:
            return [f"{prefix}-{i}" for i in range(count)]
        return namespaces_on_distinct_nodes(self.cluster, count, prefix)


@pytest.fixture(params=["single", pytest.param("cluster", marks=pytest.mark.cluster)])
def target(request: pytest.FixtureRequest) -> Target:
    """The same deployment test on a private server and on the local cluster."""
    if request.param == "cluster":
        cluster: LocalCluster = request.getfixturevalue("local_cluster")
        return Target(cluster.url, cluster)
    return Target(request.getfixturevalue("server").url, None)


@pytest.fixture
async def app_client(target: Target) -> AsyncIterator[Redis]:
    """The app's client on the target (a cluster client on the cluster)."""
    redis = create_redis(RedisSettings.from_url(target.url))
    yield redis
    await redis.aclose()
