"""Redis itself fails in the middle of traffic: a private ``redis-server`` is killed
and restarted (without persistence: data lost; with an fsync-always AOF: data kept).

Clients get typed failures within their deadlines and never hang; the in-process
worker (``LocalWorker``) reconnects and serves new requests; with the AOF, requests
that were in flight settle after the restart.
"""

from __future__ import annotations

import uuid
from typing import Any

import anyio
import pytest
from redis.asyncio import Redis

from sharedos_redis.kernel.contracts import JsonValue, ToolResult
from sharedos_redis.kernel.turn import RuntimeHost, TurnRequest
from sharedos_redis.store.client import RedisSettings, create_redis
from sharedos_redis.store.keys import OPEN_STATES
from sharedos_redis.worker.host import MessagingHost
from sharedos_redis.worker.local import LocalWorker
from tests.servers import RedisServer, ServerPool
from tests.support import wait_served
from tests.worker.helpers import make_host

from . import fault_app
from .inspect_ns import message_ids, states
from .outcomes import ROWS, Row
from .requester import ask

pytestmark = [pytest.mark.anyio, pytest.mark.slow]
IN_FLIGHT = 4


class Gate:
    """alice's turns: count starts, then wait until the test opens the gate."""

    def __init__(self, expected: int) -> None:
        self.expected, self.count = expected, 0
        self.all_started, self.open = anyio.Event(), anyio.Event()

    async def alice(self, turn: TurnRequest, host: RuntimeHost) -> JsonValue:
        self.count += 1
        if self.count >= self.expected:
            self.all_started.set()
        await self.open.wait()
        return {"echo": turn.message.payload, "attempt": turn.attempt}


async def _idle(turn: TurnRequest, host: RuntimeHost) -> JsonValue:
    return None


@pytest.fixture
async def volatile(servers: ServerPool) -> RedisServer:
    return await servers.redis(persistent=False)


@pytest.fixture
async def durable(servers: ServerPool) -> RedisServer:
    return await servers.redis(persistent=True)


async def _client(server: RedisServer) -> Redis:
    return create_redis(RedisSettings(url=server.url, socket_timeout_s=2,
                                      socket_connect_timeout_s=0.5, pool_timeout_s=2))


def _host(redis: Redis, gate: Gate, **settings: Any) -> MessagingHost:
    values = {"request_timeout_s": 4, "turn_timeout_s": 3, "lease_s": 1, "claim_idle_s": 0.5,
              "reconcile_interval_s": 0.2, "max_attempts": 5, "route_lease_s": 3, **settings}
    return make_host(redis, f"rf-{uuid.uuid4().hex[:8]}",
                     {fault_app.REQUESTER: _idle, "alice": gate.alice}, **values)


def _typed_failure(result: ToolResult) -> str:
    assert result.status in {"failed", "denied"}, result
    details = result.error.details or {}
    return str(details.get("outcome") or details.get("code") or result.error.code)


async def _in_flight(host: MessagingHost, gate: Gate, results: list[ToolResult],
                     tg: Any) -> None:
    async def one(i: int) -> None:
        results.append(await ask(host, "alice", {"i": i}))

    for i in range(IN_FLIGHT):
        tg.start_soon(one, i)
    await gate.all_started.wait()


async def test_redis_lost_in_flight_requests_end_typed_and_worker_recovers(
        volatile: RedisServer) -> None:
    redis, gate = await _client(volatile), Gate(IN_FLIGHT)
    host = _host(redis, gate)
    await fault_app.grant_all(host, [fault_app.REQUESTER], ["alice"])
    results: list[ToolResult] = []
    try:
        async with host, LocalWorker(host, block_ms=100):
            with anyio.fail_after(30):
                async with anyio.create_task_group() as tg:
                    await _in_flight(host, gate, results, tg)
                    volatile.kill()
                    down = await ask(host, "alice", {"while": "down"})
                codes = [_typed_failure(r) for r in results]
                assert len(codes) == IN_FLIGHT, codes
                assert _typed_failure(down)
                await volatile.start()  # empty: every marker, grant and stream is gone
                gate.open.set()
                await fault_app.grant_all(host, [fault_app.REQUESTER], ["alice"])
                # the agent directory is gone too: the worker's refresh re-creates it
                await wait_served(redis, host.namespace, "alice", timeout_s=10)
                after = await ask(host, "alice", {"after": "restart"})
            ROWS.append(Row(fault="redis SIGKILL, no persistence", requests=IN_FLIGHT + 1,
                            settled=0, lost=0, duplicated=0, seen_by="requester (typed)",
                            states="data lost; outcomes " + ",".join(sorted({*codes,
                                                                            _typed_failure(down)}))))
            assert after.status == "succeeded", after
            assert after.output == {"echo": {"after": "restart"}, "attempt": 1}
    finally:
        await redis.aclose()


async def test_redis_restart_with_aof_settles_in_flight_requests(durable: RedisServer) -> None:
    redis, gate = await _client(durable), Gate(IN_FLIGHT)
    host = _host(redis, gate, request_timeout_s=15, turn_timeout_s=10)
    await fault_app.grant_all(host, [fault_app.REQUESTER], ["alice"])
    results: list[ToolResult] = []
    try:
        async with host, LocalWorker(host, block_ms=100):
            with anyio.fail_after(40):
                async with anyio.create_task_group() as tg:
                    await _in_flight(host, gate, results, tg)
                    durable.kill()
                    down = await ask(host, "alice", {"while": "down"})
                    await durable.start()  # the AOF brings every marker back
                    gate.open.set()
                assert _typed_failure(down)
                after = await ask(host, "alice", {"after": "restart"})
            ids = await message_ids(redis, host.namespace)
            final = await states(redis, host.namespace, ids)
        ROWS.append(Row(fault="redis SIGKILL + AOF restart", requests=len(final),
                        settled=sum(st not in OPEN_STATES and st is not None
                                    for st in final.values()),
                        lost=sum(st in OPEN_STATES or st is None for st in final.values()),
                        duplicated=0, states=",".join(sorted({str(s) for s in final.values()})),
                        seen_by="requester"))
        assert sorted(r.status for r in results) == ["succeeded"] * IN_FLIGHT, results
        assert after.status == "succeeded", after
        assert not [mid for mid, st in final.items() if st in OPEN_STATES or st is None], final
    finally:
        await redis.aclose()
