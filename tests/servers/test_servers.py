"""The private-server fixtures work with plain redis-py asyncio clients, and refuse what
they must: a wrong certificate, an unknown CA, another tenant's keys, a dead primary."""

from __future__ import annotations

import os
import sys
import time
import uuid
from pathlib import Path

import anyio
import pytest
from redis.asyncio import Redis
from redis.asyncio.sentinel import Sentinel
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import NoPermissionError, RedisError

from . import (
    AclUser,
    RedisServer,
    SentinelCluster,
    ServerPool,
    TlsMaterial,
    add_acl_user,
    require_redis_server,
)
from ._process import poll_until

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.anyio


async def test_restart_keeps_the_port_and_the_pid_changes(redis_server: RedisServer) -> None:
    client = redis_server.client()
    try:
        await client.set("k", "v")
        port, pid = redis_server.port, redis_server.pid
        await redis_server.stop()
        assert not redis_server.running
        with pytest.raises(RedisConnectionError):
            await client.get("k")  # down: refused, not hanging
        started = time.monotonic()
        await redis_server.start()
        took = time.monotonic() - started
        assert (redis_server.port, redis_server.running) == (port, True)
        assert redis_server.pid != pid
        assert await client.get("k") is None  # no persistence: the data is gone
        assert took < 1.0, took
    finally:
        await client.aclose()


async def test_aof_server_keeps_acknowledged_writes_across_sigkill(servers: ServerPool) -> None:
    server = await servers.redis(persistent=True, config=["maxmemory 64mb"])
    client = server.client()
    try:
        await client.set("k", "v")
        await server.restart(crash=True)
        assert await client.get("k") == b"v"
        assert (await client.config_get("maxmemory"))["maxmemory"] == str(64 * 1024 * 1024)
    finally:
        await client.aclose()


async def test_cleanup_kills_only_its_own_process(servers: ServerPool) -> None:
    first, second = await servers.redis(), await servers.redis()
    first.cleanup()
    assert not first.running and second.running
    assert not first.dir.exists()
    probe = second.client()
    try:
        assert await probe.ping()
    finally:
        await probe.aclose()


_ABANDON = """
import anyio
from tests.servers import RedisServer

async def main() -> None:
    server = RedisServer()
    await server.start()
    print(server.pid, server.dir, flush=True)
    raise KeyboardInterrupt  # no cleanup(): the exit hook must kill the server

anyio.run(main)
"""


async def test_a_server_never_outlives_an_interrupted_test_process() -> None:
    require_redis_server()
    done = await anyio.run_process([sys.executable, "-c", _ABANDON], cwd=ROOT, check=False,
                                   env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert done.returncode != 0
    pid, directory = done.stdout.decode().split()
    with pytest.raises(ProcessLookupError):
        os.kill(int(pid), 0)
    assert not await anyio.Path(directory).exists()


async def test_shared_server_is_untouched(servers: ServerPool) -> None:
    shared = os.environ.get("REDIS_URL")
    server = await servers.redis()
    assert server.port != 6379
    if shared:
        assert f":{server.port}/" not in shared


async def test_tls_with_the_private_ca_connects(tls_redis_server: RedisServer) -> None:
    assert tls_redis_server.url.startswith("rediss://127.0.0.1:")
    for kwargs in ({}, {"client_cert": True}):
        client = Redis.from_url(tls_redis_server.url, **tls_redis_server.tls_kwargs(**kwargs))
        try:
            assert await client.ping()
        finally:
            await client.aclose()


async def test_tls_without_the_ca_is_refused(tls_redis_server: RedisServer) -> None:
    client = Redis.from_url(tls_redis_server.url, ssl_cert_reqs="required",
                            socket_connect_timeout=2)
    try:
        with pytest.raises(RedisConnectionError, match="CERTIFICATE_VERIFY_FAILED"):
            await client.ping()
    finally:
        await client.aclose()


async def test_plaintext_client_on_a_tls_port_gets_no_answer(
        tls_redis_server: RedisServer) -> None:
    client = Redis(port=tls_redis_server.port, socket_connect_timeout=1, socket_timeout=1)
    try:
        with pytest.raises(RedisError):
            await client.ping()
    finally:
        await client.aclose()


async def test_wrong_hostname_certificate_is_refused_when_checked(
        servers: ServerPool, tls_material: TlsMaterial) -> None:
    server = await servers.redis(tls=tls_material, tls_cert=tls_material.wrong_host)
    checked = Redis.from_url(server.url, **server.tls_kwargs(check_hostname=True))
    unchecked = Redis.from_url(server.url, **server.tls_kwargs(check_hostname=False))
    try:
        with pytest.raises(RedisConnectionError, match="CERTIFICATE_VERIFY_FAILED"):
            await checked.ping()
        assert await unchecked.ping()  # same CA: only the hostname is wrong
    finally:
        await checked.aclose()
        await unchecked.aclose()


async def test_required_client_certificate(servers: ServerPool,
                                           tls_material: TlsMaterial) -> None:
    server = await servers.redis(tls=tls_material, tls_auth_clients="yes")
    anonymous = Redis.from_url(server.url, **server.tls_kwargs())
    with_cert = Redis.from_url(server.url, **server.tls_kwargs(client_cert=True))
    try:
        with pytest.raises(RedisError):
            await anonymous.ping()
        assert await with_cert.ping()
    finally:
        await anonymous.aclose()
        await with_cert.aclose()


async def _acl_user(server: RedisServer) -> AclUser:
    return await add_acl_user(server, "tenant-a", uuid.uuid4().hex, keys=["a:*"])


async def test_acl_user_reads_its_pattern_and_is_refused_elsewhere(
        redis_server: RedisServer) -> None:
    admin = redis_server.client()
    user = await _acl_user(redis_server)
    tenant = Redis.from_url(user.url)
    try:
        await admin.set("b:secret", "x")
        await tenant.set("a:1", "mine")
        assert await tenant.get("a:1") == b"mine"
        assert await tenant.acl_whoami() == "tenant-a"
        with pytest.raises(NoPermissionError):
            await tenant.get("b:secret")
        with pytest.raises(NoPermissionError):
            await tenant.set("b:secret", "overwritten")
        with pytest.raises(NoPermissionError):
            await tenant.execute_command("FLUSHALL")  # -@dangerous
        assert await admin.get("b:secret") == b"x"
    finally:
        await tenant.aclose()
        await admin.aclose()


async def test_acl_user_with_a_wrong_password_is_refused(redis_server: RedisServer) -> None:
    user = await _acl_user(redis_server)
    intruder = Redis.from_url(user.url.replace(user.password, "guess"))
    try:
        with pytest.raises(RedisError, match=r"(?i)invalid username-password|WRONGPASS"):
            await intruder.ping()
    finally:
        await intruder.aclose()


async def _replicated(master: Redis, timeout_s: float) -> None:
    """WAIT until one replica acknowledged the writes so far; each WAIT is bounded well
    below the client's 0.5 s socket timeout (a replica still syncing on a slow machine
    must not turn one long WAIT into a read timeout)."""
    async def acknowledged() -> bool:
        return int(await master.execute_command("WAIT", 1, 200)) >= 1

    with anyio.fail_after(timeout_s):
        await poll_until(acknowledged, interval_s=0.05)


async def _write_until(master: Redis, key: str, value: str, timeout_s: float) -> None:
    """Write, retrying connection errors (no primary yet) until ``timeout_s``."""
    async def written() -> bool:
        try:
            return bool(await master.set(key, value))
        except (RedisError, OSError):
            return False

    with anyio.fail_after(timeout_s):
        await poll_until(written, interval_s=0.05)


@pytest.mark.slow
async def test_sentinel_client_writes_before_and_after_the_primary_is_killed(
        sentinel_cluster: SentinelCluster) -> None:
    cluster = sentinel_cluster
    sentinel = Sentinel(cluster.sentinels, socket_timeout=0.5, socket_connect_timeout=0.5)
    master = sentinel.master_for(cluster.master_name)
    try:
        await master.set("before", "1")
        # replication is asynchronous: without WAIT a write just before the kill may be lost
        await _replicated(master, timeout_s=10)
        old = await cluster.kill_primary()
        with pytest.raises(RedisError):
            await master.set("during", "x")  # no primary yet: a connection error, no hang
        new = await cluster.wait_new_primary(old, timeout_s=20)  # ~2-3 s, more if votes split
        assert new != old and not cluster.node_at(old).running
        await _write_until(master, "after", "2", timeout_s=10)
        assert await _read_on(cluster, new, "before") == b"1", "a WAITed write was lost"
        assert await _read_on(cluster, new, "after") == b"2", "written elsewhere"
    finally:
        await master.aclose()


@pytest.mark.slow
async def test_sentinel_failover_promotes_the_replica_and_demotes_the_old_primary(
        sentinel_cluster: SentinelCluster) -> None:
    cluster = sentinel_cluster
    old = await cluster.failover()
    new = await cluster.wait_new_primary(old, timeout_s=15)
    assert new != old and cluster.node_at(old).running
    master = Sentinel(cluster.sentinels, socket_timeout=0.5).master_for(cluster.master_name)
    try:
        await _write_until(master, "after", "2", timeout_s=5)  # a new connection: new primary
        assert await _read_on(cluster, new, "after") == b"2"
        await cluster.wait_demoted(old, timeout_s=20)
        demoted = cluster.node_at(old).client()
        try:
            role = await demoted.execute_command("ROLE")
        finally:
            await demoted.aclose()
        assert role[0] == b"slave" and role[2] == new[1]
    finally:
        await master.aclose()


async def _read_on(cluster: SentinelCluster, address: tuple[str, int], key: str) -> bytes | None:
    direct = cluster.node_at(address).client()
    try:
        assert (await direct.execute_command("ROLE"))[0] == b"master"
        value: bytes | None = await direct.get(key)
        return value
    finally:
        await direct.aclose()
