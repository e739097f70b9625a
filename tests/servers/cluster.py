"""A private local Redis Cluster: primaries (and replicas) on free loopback ports.

``LocalCluster(primaries=3)`` starts ``redis-server --cluster-enabled yes`` per node,
joins them with ``redis-cli --cluster create`` and waits until every node reports
``cluster_state:ok``; ``stop()`` kills each node by its PID and removes its files.
Never touches the shared server at ``REDIS_URL``.
"""

from __future__ import annotations

import random
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from dataclasses import dataclass, field

from redis import Redis
from redis.crc import key_slot
from redis.exceptions import RedisError

from sharedos_redis.store.keys import Keys

__all__ = ["ClusterNodeProcess", "LocalCluster", "namespaces_on_distinct_nodes"]


def _bindable(port: int) -> bool:
    with socket.socket() as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


def _free_port() -> int:
    """A free port whose cluster bus port (+10000) is free and valid too."""
    while True:
        port = random.randint(20_000, 50_000)
        if _bindable(port) and _bindable(port + 10_000):
            return port


@dataclass
class ClusterNodeProcess:
    """One ``redis-server`` of the cluster."""

    port: int
    proc: subprocess.Popen[bytes]

    def client(self) -> Redis:
        """A plain (non-cluster) client of this node."""
        return Redis(host="127.0.0.1", port=self.port, socket_timeout=5)

    def ping(self) -> bool:
        client = self.client()
        try:
            return bool(client.ping())
        finally:
            client.close()

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(timeout=10)


@dataclass
class LocalCluster:
    """A local cluster of ``primaries`` primaries with ``replicas`` replicas each
    (one primary: a single node that owns every slot, no replicas)."""

    primaries: int = 3
    replicas: int = 0
    node_timeout_ms: int = 1000
    dir: str = field(default_factory=lambda: tempfile.mkdtemp(prefix="sos-cluster-"))
    nodes: list[ClusterNodeProcess] = field(default_factory=list)

    @staticmethod
    def available() -> bool:
        """Whether ``redis-server`` and ``redis-cli`` are on PATH."""
        return bool(shutil.which("redis-server") and shutil.which("redis-cli"))

    @property
    def url(self) -> str:
        """``redis+cluster://`` with every node as a start-up node."""
        return "redis+cluster://" + ",".join(f"127.0.0.1:{n.port}" for n in self.nodes)

    def start(self) -> LocalCluster:
        """Start the nodes, create the cluster, wait until every node says it is ok."""
        for _ in range(self.primaries * (1 + self.replicas)):
            port = _free_port()
            proc = subprocess.Popen(
                ["redis-server", "--port", str(port), "--bind", "127.0.0.1",
                 "--cluster-enabled", "yes", "--cluster-config-file", f"nodes-{port}.conf",
                 "--cluster-node-timeout", str(self.node_timeout_ms), "--save", "",
                 "--appendonly", "no", "--dir", self.dir],
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            self.nodes.append(ClusterNodeProcess(port, proc))
        for node in self.nodes:
            self._wait(node.ping)
        if len(self.nodes) == 1:  # redis-cli --cluster create wants 3 primaries
            client = self.nodes[0].client()
            try:
                client.execute_command("CLUSTER", "ADDSLOTSRANGE", 0, 16383)
            finally:
                client.close()
            self._wait(self._ok)
            return self
        subprocess.run(
            ["redis-cli", "--cluster", "create",
             *(f"127.0.0.1:{n.port}" for n in self.nodes),
             "--cluster-replicas", str(self.replicas), "--cluster-yes"],
            check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=30)
        self._wait(self._ok)
        return self

    def _ok(self) -> bool:
        for node in self.nodes:
            if node.proc.poll() is not None:
                continue
            client = node.client()
            try:
                info = client.execute_command("CLUSTER", "INFO").decode()
                if "cluster_state:ok" not in info:
                    return False
                slots = client.execute_command("CLUSTER", "SLOTS")
                if sum(int(s[1]) - int(s[0]) + 1 for s in slots) != 16384:
                    return False
                if self.replicas and any(len(s) < 3 + self.replicas for s in slots):
                    return False
            finally:
                client.close()
        return True

    @staticmethod
    def _wait(check: object, timeout_s: float = 20) -> None:
        deadline = time.monotonic() + timeout_s
        last: BaseException | None = None
        while True:
            try:
                if check():  # type: ignore[operator]
                    return
            except (RedisError, OSError) as exc:
                last = exc
            if time.monotonic() > deadline:
                raise TimeoutError(f"local cluster did not become ready: {last!r}")
            time.sleep(0.05)

    def owner(self, key: str) -> int:
        """The port of the primary that owns ``key``'s slot now."""
        slot = key_slot(key.encode())
        for node in self.nodes:
            if node.proc.poll() is not None:
                continue
            client = node.client()
            try:
                for start, end, primary, *_ in client.execute_command("CLUSTER", "SLOTS"):
                    if int(start) <= slot <= int(end):
                        return int(primary[1])
            except (RedisError, OSError):
                continue
            finally:
                client.close()
        raise LookupError(key)

    def node(self, port: int) -> ClusterNodeProcess:
        return next(n for n in self.nodes if n.port == port)

    def replica_of(self, port: int, timeout_s: float = 20) -> ClusterNodeProcess:
        """A replica of the primary on ``port`` (waiting, after a failover, until the
        primary lists one: the demoted node re-attaches through gossip)."""
        found: list[str] = []

        def listed() -> bool:
            client = self.node(port).client()
            try:
                raw = client.execute_command("CLUSTER", "REPLICAS",
                                             client.execute_command("CLUSTER", "MYID"))
            finally:
                client.close()
            found[:] = [r.decode() if isinstance(r, bytes) else r for r in raw]
            return bool(found)

        self._wait(listed, timeout_s)
        return self.node(int(found[0].split()[1].split("@")[0].rsplit(":", 1)[1]))

    def wait_ready(self, timeout_s: float = 20) -> None:
        """Wait until every live node reports ``cluster_state:ok`` again."""
        self._wait(self._ok, timeout_s)

    def stop(self) -> None:
        """Kill every node by PID and delete the cluster's directory."""
        for node in self.nodes:
            node.kill()
        shutil.rmtree(self.dir, ignore_errors=True)


def namespaces_on_distinct_nodes(cluster: LocalCluster, count: int, prefix: str) -> list[str]:
    """``count`` namespace names whose hash tags land on ``count`` different primaries."""
    found: dict[int, str] = {}
    i = 0
    while len(found) < count:
        ns = f"{prefix}-{i}"
        found.setdefault(cluster.owner(Keys(ns).outbox), ns)
        i += 1
    return list(found.values())
