"""The stream worker (no arq) and per-slot reads, on fakeredis, real Redis and a cluster.

On the cluster the namespaces are chosen so their hash tags land on three different
primaries: one listener and one relay then read three nodes at once.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import anyio
import fakeredis
import pytest
from redis.asyncio import Redis

from sharedos_redis.kernel.contracts import JsonValue
from sharedos_redis.kernel.turn import RuntimeHost, TurnRequest
from sharedos_redis.router.listener import SettledListener
from sharedos_redis.store.client import RedisSettings, create_redis
from sharedos_redis.store.keys import RELAY_GROUP, Keys
from sharedos_redis.transport import OutboxRelay
from sharedos_redis.worker.services import WorkerServices
from sharedos_redis.worker.streams import StreamWorker, serve_streams

from ..servers.cluster import LocalCluster, namespaces_on_distinct_nodes
from ..support import eventually, make_context, make_envelope, serve
from .helpers import answer, ask, drop_namespace, invoke_grant, make_host, put, send_grant

pytestmark = pytest.mark.anyio
Namespaces = Callable[[int], list[str]]


@pytest.fixture(params=["fake", pytest.param("real", marks=pytest.mark.real_redis),
                        pytest.param("cluster", marks=pytest.mark.cluster)])
async def backend(request: pytest.FixtureRequest) -> AsyncIterator[tuple[Redis, Namespaces]]:
    """A client and a namespace maker: on the cluster, namespaces on distinct nodes."""
    prefix = f"s-{uuid.uuid4().hex[:8]}"
    if request.param == "fake":
        redis: Redis = fakeredis.FakeAsyncRedis(server=fakeredis.FakeServer())
    elif request.param == "real":
        redis = create_redis(RedisSettings.from_url(request.getfixturevalue("url")))
    else:
        cluster: LocalCluster = request.getfixturevalue("local_cluster")
        redis = create_redis(RedisSettings.from_url(cluster.url, max_connections=16))
    made: list[str] = []

    def namespaces(count: int) -> list[str]:
        if request.param == "cluster":
            names = namespaces_on_distinct_nodes(cluster, count, f"{prefix}-{len(made)}")
        else:
            names = [f"{prefix}-{len(made)}-{i}" for i in range(count)]
        made.extend(names)
        return names

    yield redis, namespaces
    for ns in made:
        await drop_namespace(redis, ns)
    await redis.aclose()


def _bob_and_alice(redis: Redis, ns: str, alice: Any = None, **settings: Any) -> Any:
    return make_host(redis, ns, {"bob": ask("alice", {"q": ns}),
                                 "alice": alice or answer({"from": ns})}, **settings)


async def _grants(host: Any) -> None:
    ns = host.namespace
    await put(host, send_grant(ns, "bob", "alice"), invoke_grant(ns, "bob"),
              invoke_grant(ns, "alice"))


async def _collect(into: list[Any], call: Awaitable[Any]) -> None:
    into.append(await call)


async def test_three_namespaces_each_served_by_its_stream_worker(
        backend: tuple[Redis, Namespaces]) -> None:
    redis, namespaces = backend
    hosts = [_bob_and_alice(redis, ns) for ns in namespaces(3)]
    results: list[Any] = []
    workers = [StreamWorker(host, block_ms=100) for host in hosts]
    async with hosts[0], hosts[1], hosts[2], anyio.create_task_group() as tg:
        for host, worker in zip(hosts, workers, strict=True):
            await _grants(host)
            await tg.start(worker.run)
        with anyio.fail_after(20):
            async with anyio.create_task_group() as asks:
                for host in hosts:
                    for _ in range(3):
                        asks.start_soon(_collect, results,
                                        host.start_turn("bob", {}, purpose="p"))
        for worker in workers:
            worker.stop()
    outputs = sorted(r.output["output"]["from"] for r in results if r.status == "succeeded")
    assert outputs == sorted(h.namespace for h in hosts for _ in range(3)), results


async def test_a_busy_worker_reads_no_more_than_it_can_start(
        backend: tuple[Redis, Namespaces]) -> None:
    redis, namespaces = backend
    (ns,) = namespaces(1)
    release = anyio.Event()
    started: list[str] = []

    async def alice(turn: TurnRequest, host: RuntimeHost) -> JsonValue:
        started.append(turn.message.id)
        await release.wait()
        return {"from": ns}

    host = _bob_and_alice(redis, ns, alice, max_jobs=1)
    await _grants(host)
    worker = StreamWorker(host, block_ms=100)
    results: list[Any] = []
    keys = Keys(ns)
    async with host, anyio.create_task_group() as tg:
        await tg.start(worker.run)
        for _ in range(3):
            tg.start_soon(_collect, results, host.start_turn("bob", {}, purpose="p"))

        async def one_runs_one_waits_one_unread() -> bool:
            pending = (await redis.xpending(keys.outbox, RELAY_GROUP))["pending"]
            return bool(started) and await redis.xlen(keys.outbox) == 2 and pending == 1

        await eventually(one_runs_one_waits_one_unread)
        assert len(started) == 1  # one slot: one turn runs, one entry waits, one is unread
        release.set()

        async def all_answered() -> bool:
            return len(results) == 3

        await eventually(all_answered)
        worker.stop()
    assert [r.output["status"] for r in results] == ["succeeded"] * 3, results


async def test_rewake_appends_one_entry_per_period_and_hand_backs_always(
        backend: tuple[Redis, Namespaces]) -> None:
    redis, namespaces = backend
    (ns,) = namespaces(1)
    worker = StreamWorker(_bob_and_alice(redis, ns))
    outbox = Keys(ns).outbox
    await worker.rewake(ns, "m-1", "lease")
    await worker.rewake(ns, "m-1", "lease")
    await worker.rewake(ns, "m-2", "lease")
    assert await redis.xlen(outbox) == 2
    await worker.hand_back(ns, "m-1")
    await worker.hand_back(ns, "m-1")
    assert await redis.xlen(outbox) == 4
    ids = [fields[b"id"] for _, fields in await redis.xrange(outbox)]
    assert ids == [b"m-1", b"m-2", b"m-1", b"m-1"]


async def test_one_relay_and_one_listener_read_namespaces_on_every_node(
        backend: tuple[Redis, Namespaces]) -> None:
    redis, namespaces = backend
    spread = namespaces(3)
    woken: list[tuple[str, str]] = []

    async def wake(namespace: str, message_id: str) -> None:
        woken.append((namespace, message_id))

    from sharedos_redis.transport import RedisStreamTransport

    transport = RedisStreamTransport(redis)
    for ns in spread:
        await serve(redis, ns)  # no worker runs: the agents' route leases, as one would
        ctx = make_context(ns)
        assert (await transport.deliver(ctx, make_envelope(ctx, id=f"m-{ns}"))).status == \
            "accepted"
    relay = OutboxRelay(redis, spread, wake, consumer="r1", block_ms=50)
    await relay.ensure_groups()
    with anyio.fail_after(10):
        while len(woken) < 3:
            await relay.step()
    assert sorted(woken) == sorted((ns, f"m-{ns}") for ns in spread)

    listener = SettledListener(redis, limiter=anyio.CapacityLimiter(4), block_ms=100,
                               timeout_s=5, linger_s=60)
    async with anyio.create_task_group() as tg:
        await tg.start(listener.run)
        async with listener.watch(spread[0], "a") as a, listener.watch(spread[1], "b") as b, \
                listener.watch(spread[2], "c") as c:
            for ns, mid in zip(spread, "abc", strict=True):
                await redis.xadd(Keys(ns).settled, {"id": mid, "state": "replied",
                                                    "result": ns})
            with anyio.fail_after(5):
                for slot in (a, b, c):
                    await slot.event.wait()
            assert [s.outcome.result for s in (a, b, c) if s.outcome] == spread
        listener.stop()


async def test_a_stream_worker_whose_services_die_exits_one() -> None:
    redis: Redis = fakeredis.FakeAsyncRedis(server=fakeredis.FakeServer())
    host = _bob_and_alice(redis, "died")

    async def dying(self: Any, *, task_status: Any = anyio.TASK_STATUS_IGNORED) -> None:
        task_status.started()
        raise RuntimeError("relay bug")

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(WorkerServices, "run", dying)
        with anyio.fail_after(10):
            assert await serve_streams(host, handle_signals=False) == 1
    await redis.aclose()


async def test_a_starved_stream_worker_fails_the_request_its_waiting_turn_needs(
        backend: tuple[Redis, Namespaces]) -> None:
    """max_in_flight=1: alice waits on carol, whose entry the relay would not read (no
    free slot). The starved worker reads it anyway, sees the deadlock and fails carol's
    request request_deadlocked at once; alice answers, bob gets it."""
    redis, namespaces = backend
    (ns,) = namespaces(1)

    async def alice(turn: TurnRequest, host: RuntimeHost) -> JsonValue:
        note = await host.call("messages.request", {
            "recipient": {"kind": "agent", "agentId": "carol"}, "payload": {}})
        return note.to_wire()

    host = make_host(redis, ns, {"bob": ask("alice", {}), "alice": alice,
                                 "carol": answer("unreachable")},
                     max_jobs=1, max_in_flight=1, request_timeout_s=8, turn_timeout_s=6)
    await put(host, send_grant(ns, "bob", "alice"), send_grant(ns, "alice", "carol"),
              *(invoke_grant(ns, who) for who in ("bob", "alice", "carol")))
    worker = StreamWorker(host, block_ms=100)
    async with host, anyio.create_task_group() as tg:
        await tg.start(worker.run)
        began = time.monotonic()
        with anyio.fail_after(10):
            result = await host.start_turn("bob", {}, purpose="p")
        elapsed = time.monotonic() - began
        worker.stop()
    to_carol = result.output["output"]  # type: ignore[index]
    assert to_carol["status"] == "failed", result.output
    assert to_carol["error"]["details"] == {"outcome": "request_deadlocked"}
    assert elapsed < 4, elapsed  # carol's deadline (alice's turn) is 6 s away
