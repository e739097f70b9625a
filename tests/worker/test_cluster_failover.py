"""A replica promotion under load on a local cluster: no hang, every request typed or
succeeded, and the workers serve the new primary without a restart.

Its own cluster (3 primaries with a replica each, shared by both rows): ``failover``
promotes the replica of the namespace's primary with ``CLUSTER FAILOVER`` (a
coordinated switch, no write lost); ``kill`` SIGKILLs that primary and lets the
cluster elect the replica (``cluster-node-timeout`` 1 s; an acknowledged write may be
lost, which a request then sees as a typed outcome, never a hang).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from redis.asyncio import Redis

from sharedos_redis.kernel.reasons import REASON_CODES
from sharedos_redis.store.client import RedisSettings, create_redis
from sharedos_redis.store.keys import Keys

from ..servers.cluster import LocalCluster
from ..support import eventually
from . import proc_app
from .test_deployment import Worker, _grants, _ns, _outcome

pytestmark = [pytest.mark.anyio, pytest.mark.slow, pytest.mark.cluster]


@pytest.fixture(scope="module")
def replicated() -> Iterator[LocalCluster]:
    """One cluster for both rows: ``failover`` swaps a primary and its replica, then
    ``kill`` takes a primary of the still complete cluster (each on a new namespace)."""
    if not LocalCluster.available():
        pytest.skip("no redis-server/redis-cli binaries")
    cluster = LocalCluster(primaries=3, replicas=1).start()
    try:
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture
async def app_client(replicated: LocalCluster) -> AsyncIterator[Redis]:
    redis = create_redis(RedisSettings.from_url(replicated.url, max_connections=32))
    yield redis
    await redis.aclose()


@pytest.fixture
def started(tmp_path: Path) -> Iterator[Callable[..., Worker]]:
    workers: list[Worker] = []

    def start(url: str, ns: str) -> Worker:
        workers.append(Worker(url, ns, tmp_path / f"worker-{len(workers)}.log"))
        return workers[-1]

    yield start
    for worker in workers:
        worker.stop()


class Load:
    """Requesters that keep asking until told to stop; every outcome is counted."""

    def __init__(self, host: Any) -> None:
        self.host = host
        self.outcomes: Counter[str] = Counter()
        self.after_switch = 0
        self.switched = False
        self.stopping = False

    async def requester(self) -> None:
        while not self.stopping:
            with anyio.fail_after(15):  # request deadline 6 s: anything longer is a hang
                outcome = await _outcome(self.host)
            self.outcomes[outcome] += 1
            if outcome == "succeeded" and self.switched:
                self.after_switch += 1
            if outcome == "store_unavailable":
                await anyio.sleep(0.05)  # the load generator's own pacing


@pytest.mark.parametrize("how", ["failover", "kill"])
async def test_replica_promotion_under_load_ends_every_request_typed_or_succeeded(
        how: str, replicated: LocalCluster, app_client: Redis,
        started: Callable[..., Worker]) -> None:
    ns = _ns()
    host = proc_app.build(app_client, ns, url=replicated.url, request_timeout_s=6,
                          turn_timeout_s=4)
    await _grants(host)
    primary = replicated.owner(Keys(ns).outbox)
    replica = replicated.replica_of(primary)
    workers = [started(replicated.url, ns) for _ in range(2)]
    load = Load(host)
    async with host, anyio.create_task_group() as tg:
        for _ in range(6):
            tg.start_soon(load.requester)

        async def warmed() -> bool:
            return load.outcomes["succeeded"] >= 10

        await eventually(warmed, timeout_s=30)
        if how == "failover":
            client = replica.client()
            try:
                client.execute_command("CLUSTER", "FAILOVER")
            finally:
                client.close()
        else:
            replicated.node(primary).kill()
        load.switched = True

        async def promoted() -> bool:
            return await anyio.to_thread.run_sync(
                lambda: replicated.owner(Keys(ns).outbox)) == replica.port

        await eventually(promoted, timeout_s=20, every_s=0.1)

        async def serving_again() -> bool:
            return load.after_switch >= 10

        await eventually(serving_again, timeout_s=40)
        load.stopping = True
    typed = set(load.outcomes) - {"succeeded"}
    # every other outcome is a code of the closed vocabulary (or the typed store error)
    assert typed <= {*REASON_CODES, "store_unavailable"}, load.outcomes
    assert all(worker.proc.poll() is None for worker in workers), workers[0].text()
    print(f"{how}: outcomes {dict(load.outcomes)}")
