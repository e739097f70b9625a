"""Slots for running turns only: a turn waiting for a nested reply gives its running
slot back, so a depth-10 chain completes with ``max_jobs=2`` (in process and in a real
worker process); ``max_in_flight`` still bounds turns started and not finished."""

from __future__ import annotations

import uuid
from collections import defaultdict
from pathlib import Path

import anyio
import pytest
from redis.asyncio import Redis

from sharedos_redis.errors import ConfigurationError
from sharedos_redis.worker.local import LocalWorker
from sharedos_redis.worker.settings import HostSettings
from sharedos_redis.worker.slots import Deadlocked, TurnSlot, TurnSlots

from ..servers import RedisServer, ServerPool
from ..support import wait_served
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


async def test_a_deadlock_among_queued_requests_fails_one_and_only_then() -> None:
    """Every in-flight turn waits on a request queued here for a slot: one of those
    requests (the smallest id) is refused Deadlocked; a wait on a request running
    elsewhere is no deadlock."""
    slots = TurnSlots(running=2, in_flight=2)
    a, b = slots.try_take(), slots.try_take()
    assert a is not None and b is not None
    a.release_running(waiting_on="child-a")  # a's child is not queued here (yet)
    b.release_running(waiting_on="child-b")
    taken: dict[str, TurnSlot | str] = {}
    done: defaultdict[str, anyio.Event] = defaultdict(anyio.Event)

    async def take(message_id: str) -> None:
        try:
            taken[message_id] = await slots.take(message_id)
        except Deadlocked:
            taken[message_id] = "deadlocked"
        done[message_id].set()

    async def until_done(message_id: str) -> None:
        with anyio.fail_after(5):
            await done[message_id].wait()

    async with anyio.create_task_group() as tg:
        tg.start_soon(take, "child-b")
        tg.start_soon(take, "other")  # a request nobody here waits on
        await anyio.wait_all_tasks_blocked()
        assert taken == {} and slots.deadlocked() is None  # child-a may run elsewhere
        tg.start_soon(take, "child-a")
        await until_done("child-a")
        await anyio.wait_all_tasks_blocked()
        assert taken == {"child-a": "deadlocked"}  # one victim: its parent gets an outcome
        assert slots.deadlocked() is None  # a's wait is no longer on a queued request
        a.reacquire_running()  # the typed failure reached a: it resumes and ends
        a.close()
        await until_done("child-b")
        await anyio.wait_all_tasks_blocked()
        assert set(taken) == {"child-a", "child-b"}  # b's child got a's in-flight slot
        child_b = taken["child-b"]
        assert isinstance(child_b, TurnSlot) and child_b.running
        child_b.close()
        b.reacquire_running()
        b.close()
    assert isinstance(taken["other"], TurnSlot)
    taken["other"].close()
    assert slots.free == 2 and not slots.holders


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
        await wait_served(client, ns, *CHAIN[1:])  # the worker is up
        with anyio.fail_after(40):
            async with host:
                result = await host.start_turn("c0", {}, purpose="chain")
        assert result.status == "succeeded" and result.output == CHAIN, worker.text()
        assert len(worker.turn_lines()) == chain_app.DEPTH  # c1..c10 ran in the worker
    finally:
        worker.stop()
        await client.aclose()
