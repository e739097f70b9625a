"""Cancelling a root stops the running turns below it promptly, across processes: a
real ``sharedos-redis worker`` runs alice (who asked carol) and carol (who works until
stopped); the test process cancels bob's request to alice. carol's request is
cancelled by the cascade, her worker sees the settlement and fires her turn's cancel
scope well before its next lease renewal, and no late settlement of hers is accepted."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import anyio
import pytest
from redis.asyncio import Redis

from sharedos_redis.kernel.contracts import ExecutionResult
from sharedos_redis.router.router import RedisRequestRouter
from sharedos_redis.store.audit import RedisAuditSink
from sharedos_redis.store.directory import AgentDirectory
from sharedos_redis.store.tree import CASCADE_CODE

from ..servers import RedisServer
from ..support import eventually
from . import tree_app

pytestmark = [pytest.mark.anyio, pytest.mark.slow]
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
async def client(client: Redis, ns: str) -> AsyncIterator[Redis]:
    """The worker tests' client; the tree app's signals key is deleted too."""
    yield client
    await client.delete(tree_app.signals_key(ns))


@pytest.fixture
def worker_log(server: RedisServer, ns: str, tmp_path: Path) -> Iterator[Path]:
    """A ``sharedos-redis worker`` process on ``tree_app``; yields its log file."""
    path = tmp_path / "worker.log"
    with path.open("wb") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "sharedos_redis.worker.cli", "worker", "--app",
             "tests.worker.tree_app:host"], cwd=ROOT, stdout=log, stderr=log,
            env={**os.environ, "SHAREDOS_NAMESPACE": ns, "SHAREDOS_REDIS_URL": server.url,
                 "PYTHONPATH": str(ROOT)})
        try:
            yield path
        finally:
            proc.kill()
            proc.wait()


async def _signal(client: Redis, ns: str, timeout_s: float) -> str:
    popped = await client.blpop([tree_app.signals_key(ns)], timeout=timeout_s)
    assert popped is not None, "no signal"
    return str(popped[1].decode())


async def test_cancelling_the_root_stops_the_running_grandchild_turn_promptly(
        client: Redis, ns: str, worker_log: Path) -> None:
    host = tree_app.build(client, ns)
    await tree_app.grant_all(host)
    results: list[ExecutionResult] = []
    directory = AgentDirectory(client)

    async def serving() -> bool:  # the worker registered its agents (route leases)
        return None not in [await directory.expiry(ns, who) for who in ("alice", "carol")]

    await eventually(serving, timeout_s=30)
    async with host, anyio.create_task_group() as tg:
        async def bob() -> None:
            results.append(await host.start_turn("bob", {}, purpose="plan",
                                                 trace_id="trace-p"))

        tg.start_soon(bob)
        assert await _signal(client, ns, 30) == "carol:started"
        router = RedisRequestRouter(client)
        tree = await router.tree(ns, "trace-p")
        root, child = tree.nodes  # bob -> alice, and alice's request to carol
        assert tree.roots == [root] and root.children == (child.id,)
        assert (root.sender, root.recipient, child.recipient) == (
            "agent:bob", "agent:alice", "agent:carol")
        assert (root.state, child.state, child.parent) == ("running", "running", root.id)

        started = time.monotonic()
        await router.cancel(ns, root.id)
        # her lease renews every 10 s: a stop within 5 s came from the settlement
        assert await _signal(client, ns, 5) == "carol:stopped"
        stopped_s = time.monotonic() - started
    assert results[0].status == "succeeded"  # bob's tool call failed; his turn did not
    print(f"carol's turn stopped {stopped_s * 1000:.0f} ms after the root was cancelled")

    def turn_outcomes() -> list[str]:
        lines = worker_log.read_text().splitlines()
        return [line for line in lines if " turn namespace=" in line]

    async def both_logged() -> bool:
        return len(turn_outcomes()) == 2

    await eventually(both_logged)  # the log file has no event to wait on
    outcomes = turn_outcomes()
    assert all("outcome=request_closed" in line for line in outcomes), outcomes
    tree = await RedisRequestRouter(client).tree(ns, "trace-p")
    assert [(n.state, n.code) for n in tree.nodes] == [
        ("cancelled", "request_cancelled"), ("cancelled", CASCADE_CODE)]
    events = [e for _, e in await RedisAuditSink(client).read(ns, count=10_000)]
    assert not [e for e in events if e.type == "reply.accepted"]
    cascaded = [e for e in events if e.reason == CASCADE_CODE]
    assert [e.message_id for e in cascaded] == [child.id]
    assert {(e.metadata or {}).get("cascadeRoot") for e in cascaded} == {root.id}
