"""1 primary + 1 replica + 3 sentinels on loopback, with failover helpers.

The sentinels are configured with each other's ids and the replica up front
(``known-sentinel``/``known-replica``), so the cluster is usable as soon as the
processes answer instead of after Sentinel's 2 s hello round. After a SIGKILL of
the primary (``down-after-milliseconds 1000``) a new primary is elected in ~2-3 s.

After :meth:`SentinelCluster.failover` the old primary stays a writable primary for
~10 s until Sentinel demotes it (Sentinel waits 8 s plus an INFO period): clients
still connected to it keep writing there, and those writes are lost at demotion.
"""

from __future__ import annotations

import secrets
from functools import partial
from typing import Any

import anyio
from redis.exceptions import RedisError, ResponseError

from ._process import poll_until
from .redis_server import RedisServer

__all__ = ["MASTER_NAME", "SentinelCluster"]

MASTER_NAME = "mymaster"
Address = tuple[str, int]


class SentinelCluster:
    """A Sentinel-managed primary/replica pair; every process is stopped by :meth:`cleanup`."""

    def __init__(self, *, sentinels: int = 3, quorum: int = 2, down_after_ms: int = 1000,
                 failover_timeout_ms: int = 2000, master_name: str = MASTER_NAME) -> None:
        self.master_name = master_name
        self.data_nodes = [RedisServer(name="primary")]
        self.data_nodes.append(RedisServer(name="replica", config=[
            f"replicaof {self.data_nodes[0].host} {self.data_nodes[0].port}"]))
        ids = [secrets.token_hex(20) for _ in range(sentinels)]
        nodes = [RedisServer(name=f"sentinel{i}", sentinel=True) for i in range(sentinels)]
        primary, replica = self.data_nodes
        self.sentinel_nodes: list[RedisServer] = []
        for i, node in enumerate(nodes):
            node.extra_config = [
                f"sentinel myid {ids[i]}",
                f"sentinel monitor {master_name} {primary.host} {primary.port} {quorum}",
                f"sentinel down-after-milliseconds {master_name} {down_after_ms}",
                f"sentinel failover-timeout {master_name} {failover_timeout_ms}",
                f"sentinel parallel-syncs {master_name} 1",
                f"sentinel known-replica {master_name} {replica.host} {replica.port}",
                *(f"sentinel known-sentinel {master_name} {other.host} {other.port} {ids[j]}"
                  for j, other in enumerate(nodes) if j != i)]
            self.sentinel_nodes.append(node)

    @property
    def sentinels(self) -> list[Address]:
        """The sentinels' ``(host, port)`` addresses, for ``redis.asyncio.sentinel.Sentinel``."""
        return [node.address for node in self.sentinel_nodes]

    def node_at(self, address: Address) -> RedisServer:
        """The data node listening on ``address``."""
        return next(n for n in self.data_nodes if n.address == tuple(address))

    async def start(self, timeout_s: float = 10.0) -> None:
        """Start every process; return once each sentinel sees a healthy replica."""
        with anyio.fail_after(timeout_s):
            for node in self.data_nodes:
                await node.start()
            await poll_until(lambda: _replica_in_sync(self.data_nodes[1]))
            for node in self.sentinel_nodes:
                await node.start()
            for node in self.sentinel_nodes:
                await poll_until(partial(self._sees_healthy_replica, node))

    async def primary_address(self) -> Address:
        """The primary as the first answering sentinel reports it."""
        for node in self.sentinel_nodes:
            addr = await _ask(node, "SENTINEL", "GET-MASTER-ADDR-BY-NAME", self.master_name)
            if addr:
                return addr[0].decode(), int(addr[1])
        raise ConnectionError("no sentinel answered")

    async def kill_primary(self) -> Address:
        """SIGKILL the current primary; returns its (old) address."""
        old = await self.primary_address()
        self.node_at(old).kill()
        return old

    async def failover(self, timeout_s: float = 10.0) -> Address:
        """``SENTINEL FAILOVER`` (no agreement needed); returns the old primary's address."""
        old = await self.primary_address()
        admin = self.sentinel_nodes[0].client()
        try:
            async def started() -> bool:
                try:
                    await admin.execute_command("SENTINEL", "FAILOVER", self.master_name)
                except ResponseError as exc:  # NOGOODSLAVE until the replica is fresh
                    if "NOGOODSLAVE" not in str(exc):
                        raise
                    return False
                return True

            with anyio.fail_after(timeout_s):
                await poll_until(started, interval_s=0.05)
        finally:
            await admin.aclose()
        return old

    async def wait_new_primary(self, old: Address, timeout_s: float = 15.0) -> Address:
        """Poll until a majority of sentinels name a primary other than ``old`` that
        answers ``ROLE`` as master; returns its address (TimeoutError after ``timeout_s``)."""
        found: list[Address] = []

        async def elected() -> bool:
            new = await self._majority_primary()
            if new is None or new == tuple(old) or not await _is_master(self.node_at(new)):
                return False
            found.append(new)
            return True

        with anyio.fail_after(timeout_s):
            await poll_until(elected, interval_s=0.05)
        return found[0]

    async def wait_demoted(self, old: Address, timeout_s: float = 20.0) -> None:
        """Poll until the node at ``old`` (alive after :meth:`failover`, or restarted after
        :meth:`kill_primary`) is a replica in sync with the new primary. Sentinel demotes
        it ~10 s after the failover; until then it still accepts writes that are lost."""
        node = self.node_at(old)
        async def demoted() -> bool:
            role = await _ask(node, "ROLE")
            return bool(role) and role[0] == b"slave" and await _replica_in_sync(node)

        with anyio.fail_after(timeout_s):
            await poll_until(demoted, interval_s=0.05)

    async def stop(self) -> None:
        """Shut every process down cleanly (sentinels first)."""
        for node in [*self.sentinel_nodes, *self.data_nodes]:
            await node.stop()

    def cleanup(self) -> None:
        """Kill whatever still runs and delete every directory."""
        for node in [*self.sentinel_nodes, *self.data_nodes]:
            node.cleanup()

    async def _majority_primary(self) -> Address | None:
        votes: dict[Address, int] = {}
        for node in self.sentinel_nodes:
            addr = await _ask(node, "SENTINEL", "GET-MASTER-ADDR-BY-NAME", self.master_name)
            if addr:
                key = (addr[0].decode(), int(addr[1]))
                votes[key] = votes.get(key, 0) + 1
        best = max(votes.items(), key=lambda kv: kv[1], default=None)
        return best[0] if best and best[1] * 2 > len(self.sentinel_nodes) else None

    async def _sees_healthy_replica(self, node: RedisServer) -> bool:
        replicas = await _ask(node, "SENTINEL", "REPLICAS", self.master_name) or []
        for raw in replicas:
            fields = dict(zip(raw[::2], raw[1::2], strict=True))
            if fields.get(b"flags") == b"slave" and fields.get(b"master-link-status") == b"ok":
                return True
        return False


async def _ask(node: RedisServer, *command: str) -> Any:
    """One command on a fresh short-timeout connection; ``None`` if the node is down."""
    if not node.running:
        return None
    client = node.client(socket_connect_timeout=0.3, socket_timeout=0.5)
    try:
        return await client.execute_command(*command)
    except (RedisError, OSError):
        return None
    finally:
        await client.aclose()


async def _replica_in_sync(node: RedisServer) -> bool:
    info = await _ask(node, "INFO", "replication")
    return bool(info) and info.get("master_link_status") == "up"  # INFO parsed to a dict


async def _is_master(node: RedisServer) -> bool:
    role = await _ask(node, "ROLE")
    return bool(role) and role[0] == b"master"
