"""Slots for running turns only: a turn waiting for a nested reply gives its running
slot back, so a depth-10 chain completes with ``max_jobs=2`` (in process and in a real
worker process); ``max_in_flight`` still bounds turns started and not finished."""

from __future__ import annotations

import uuid
from pathlib import Path

import anyio
import pytest
from redis.asyncio import Redis

from sharedos_redis.errors import ConfigurationError
from sharedos_redis.worker.local import LocalWorker
from sharedos_redis.worker.settings import HostSettings
from sharedos_redis.worker.slots import TurnSlots

from ..servers import RedisServer, ServerPool
from . import chain_app
from .test_deployment import Worker

pytestmark = pytest.mark.anyio
CHAIN = [chain_app.agent_name(i) for i in range(chain_app.DEPTH + 1)]


async def test_slots_bound_running_and_in_flight_apart() -> None:
    slots = TurnSlots(running=1, in_flight=2)
    first = slots.try_take()
    assert first is not None and slots.try_take() is None  # no running slot left
    first.release_running()  # first waits for a nested reply
    second = slots.try_take()
    assert second is not None and slots.free == 0  # in flight: 2 of 2
    first.reacquire_running()  # its reply is in: it resumes without queueing for a slot
    assert not first.running and slots.try_take() is None
    second.close()
    first.reacquire_running()
    assert first.running and slots.try_take() is None
    first.close()
    first.close()  # idempotent
    assert slots.free == 1


def test_max_in_flight_below_max_jobs_is_refused() -> None:
    with pytest.raises(ConfigurationError, match="max_in_flight"):
        HostSettings(max_jobs=8, max_in_flight=4)


async def test_depth_ten_chain_with_two_slots_in_process(redis: Redis, ns: str) -> None:
    host = chain_app.build(redis, ns, max_jobs=2)
    await chain_app.grant_chain(host)
    with anyio.fail_after(30):
        async with host, LocalWorker(host):
            result = await host.start_turn("c0", {}, purpose="chain")
    assert result.status == "succeeded" and result.output == CHAIN, result


@pytest.mark.slow
async def test_depth_ten_chain_with_two_slots_in_one_worker_process(
        servers: ServerPool, tmp_path: Path) -> None:
    server: RedisServer = await servers.redis()
    ns = f"chain-{uuid.uuid4().hex[:8]}"
    client = Redis.from_url(server.url)
    worker = Worker(server.url, ns, tmp_path / "worker.log",
                    app="tests.worker.chain_app:host", TEST_MAX_JOBS="2")
    try:
        host = chain_app.build(client, ns)
        await chain_app.grant_chain(host)
        with anyio.fail_after(40):
            async with host:
                result = await host.start_turn("c0", {}, purpose="chain")
        assert result.status == "succeeded" and result.output == CHAIN, worker.text()
        assert len(worker.turn_lines()) == chain_app.DEPTH  # c1..c10 ran in the worker
    finally:
        worker.stop()
        await client.aclose()
