"""The cluster client: settings, callers that wait for a connection, slots, server time."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import anyio
import fakeredis
import pytest
from redis.asyncio import Connection, Redis
from redis.asyncio.cluster import RedisCluster
from redis.crc import key_slot

from sharedos_redis.errors import ConfigurationError, StoreUnavailable
from sharedos_redis.store.client import RedisSettings, create_pool, create_redis
from sharedos_redis.store.cluster import ClusterClient, is_cluster, slot_groups
from sharedos_redis.store.keys import Keys
from sharedos_redis.store.markers import MarkerStore
from sharedos_redis.store.scripts import Scripts

from ..servers.cluster import LocalCluster, namespaces_on_distinct_nodes

pytestmark = pytest.mark.anyio


def test_cluster_urls_parse_and_refuse_what_a_cluster_cannot_do() -> None:
    settings = RedisSettings.from_url("redis+cluster://u:pw@10.0.0.1:7000,10.0.0.2:7001")
    assert settings.cluster and not settings.tls
    assert RedisSettings.from_url("rediss+cluster://h:7000", ssl_ca_certs="/ca.pem").tls
    assert not RedisSettings.from_url("redis://h:6379/0").cluster
    with pytest.raises(ConfigurationError, match="database 0"):
        RedisSettings.from_url("redis+cluster://h:7000", db=3)
    with pytest.raises(ConfigurationError, match="database 0"):
        create_redis(RedisSettings.from_url("redis+cluster://h:7000/2"))
    with pytest.raises(ConfigurationError, match="address"):
        create_redis(RedisSettings.from_url("redis+cluster://h:notaport"))
    with pytest.raises(ConfigurationError, match="one pool per node"):
        create_pool(settings)
    with pytest.raises(ConfigurationError, match="TLS files"):
        RedisSettings.from_url("redis+cluster://h:7000", ssl_ca_certs="/ca.pem")


async def test_cluster_client_carries_the_settings() -> None:
    client = create_redis(RedisSettings.from_url(
        "rediss+cluster://u:pw@10.0.0.1:7000,10.0.0.2:7001", max_connections=3,
        pool_timeout_s=1.5, ssl_ca_certs="/ca.pem"))
    try:
        assert isinstance(client, ClusterClient) and is_cluster(client)
        assert client.pool_timeout_s == 1.5
        kwargs = client.nodes_manager.connection_kwargs
        assert kwargs["max_connections"] == 3 and kwargs["username"] == "u"
        assert kwargs["password"] == "pw" and kwargs["ssl_ca_certs"] == "/ca.pem"
        assert kwargs["ssl_check_hostname"] is True
        names = {node.name for node in client.nodes_manager.startup_nodes.values()}
        assert names == {"10.0.0.1:7000", "10.0.0.2:7001"}
    finally:
        await client.aclose()


def test_slot_groups_split_only_on_a_cluster() -> None:
    keys = [Keys(f"n{i}").outbox for i in range(5)]
    assert slot_groups(object(), keys) == [keys]
    cluster = RedisCluster.__new__(ClusterClient)  # no connection needed to group
    groups = slot_groups(cluster, [*keys, keys[0]])
    assert sorted(k for g in groups for k in g) == sorted(keys)
    assert all(len({key_slot(k.encode()) for k in g}) == 1 for g in groups)


@pytest.fixture
async def cluster_redis(local_cluster: LocalCluster) -> AsyncIterator[Redis]:
    client = create_redis(RedisSettings.from_url(local_cluster.url, max_connections=2,
                                                 pool_timeout_s=5))
    yield client
    await client.aclose()


@pytest.mark.cluster
async def test_callers_wait_for_a_connection_instead_of_failing(cluster_redis: Redis) -> None:
    # 2 connections per node, 64 concurrent callers: redis-py alone raises
    # MaxConnectionsError for most of them; here every one waits its turn
    results: list[bytes | None] = []

    async def call(i: int) -> None:
        await cluster_redis.set(f"wait-test:{i}", i, px=10_000)
        pipe = cluster_redis.pipeline(transaction=False)
        pipe.get(f"wait-test:{i}")
        pipe.get(f"wait-test:{i + 1000}")
        results.append((await pipe.execute())[0])

    async with anyio.create_task_group() as tg:
        for i in range(64):
            tg.start_soon(call, i)
    assert sorted(int(r or -1) for r in results) == list(range(64))


@pytest.mark.cluster
async def test_a_caller_that_waits_too_long_gets_a_typed_error(local_cluster: LocalCluster) -> None:
    client = create_redis(RedisSettings.from_url(local_cluster.url, max_connections=1,
                                                 pool_timeout_s=0.2, socket_timeout_s=5))
    markers = MarkerStore(client)
    try:
        await client.ping()
        async with anyio.create_task_group() as tg:
            # one blocked read holds the only connection for 2 s
            tg.start_soon(lambda: client.xread({"wait-test:none": "$"}, block=2000))
            await anyio.sleep(0.1)
            with pytest.raises(StoreUnavailable, match="MaxConnectionsError"):
                await markers.fields("x", "m", ("state",))
    finally:
        await client.aclose()


@pytest.mark.cluster
async def test_server_time_runs_on_the_namespace_node(local_cluster: LocalCluster,
                                                      cluster_redis: Redis) -> None:
    namespaces = namespaces_on_distinct_nodes(local_cluster, 3, "time")
    markers = MarkerStore(cluster_redis)
    for ns in namespaces:
        owner = local_cluster.owner(Keys(ns).open)
        before = _time_calls(local_cluster)
        for _ in range(3):
            await markers.scan_open(ns, older_than_ms={"accepted": 0})  # reads the clock
        after = _time_calls(local_cluster)
        grew = {port for port in after if after[port] > before[port]}
        assert grew == {owner}  # never a keyless TIME on a random node


def _time_calls(cluster: LocalCluster) -> dict[int, int]:
    calls = {}
    for node in cluster.nodes:
        client = node.client()
        try:
            stats = client.info("commandstats").get("cmdstat_time", {})
            calls[node.port] = int(stats.get("calls", 0))
        finally:
            client.close()
    return calls


@pytest.mark.cluster
async def test_a_connection_torn_down_under_a_command_is_a_typed_outage(
        local_cluster: LocalCluster, monkeypatch: pytest.MonkeyPatch) -> None:
    # redis-py's cluster client disconnects every node after one connection error; a
    # connection another task is using at that moment loses its writer under it
    client = create_redis(RedisSettings.from_url(local_cluster.url))
    markers = MarkerStore(client)
    try:
        assert await markers.fields("torn", "m", ("state",)) == [None]  # connected
        original = Connection._send_packed_command
        torn: list[bool] = []

        async def send(self: Connection, command: Any) -> None:
            if not torn:
                torn.append(True)
                self._writer = None  # what a concurrent disconnect does
            await original(self, command)

        monkeypatch.setattr(Connection, "_send_packed_command", send)
        with pytest.raises(StoreUnavailable, match="connection closed under the command"):
            await markers.fields("torn", "m", ("state",))
        assert torn
        assert await markers.fields("torn", "m", ("state",)) == [None]  # and it recovers
    finally:
        await client.aclose()


async def test_a_script_the_reload_cannot_reach_runs_once_by_eval(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # a promoted cluster replica has no scripts, and redis-py's reload may load them
    # elsewhere: EVALSHA fails twice, then EVAL (routed by KEYS[1]) runs the script once
    redis = fakeredis.FakeAsyncRedis(server=fakeredis.FakeServer())
    scripts = Scripts(redis)
    key = Keys("evalfallback").outbox
    missing = "0" * 40

    async def load_elsewhere(script: str) -> str:
        return missing  # SCRIPT LOAD went to another node

    monkeypatch.setattr(redis, "script_load", load_elsewhere)
    scripts._script("publish_wake").sha = missing
    added = await scripts.call("publish_wake", [Keys("evalfallback").rewake("m", "t"), key],
                               ["m", 10_000])
    assert added == 1 and await redis.xlen(key) == 1  # ran, and exactly once
    await redis.aclose()
