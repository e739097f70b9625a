"""Finding finished requests: ``RedisRequestRouter.recent`` (fakeredis and real Redis) and
the ``sharedos-redis recent`` / ``show --last`` commands (click's CliRunner, real Redis)."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from datetime import datetime

import anyio
import pytest
from click.testing import CliRunner
from redis.asyncio import Redis

from sharedos_redis.kernel.contracts import agent
from sharedos_redis.router import RedisRequestRouter
from sharedos_redis.store.keys import Keys
from sharedos_redis.store.markers import MarkerStore
from sharedos_redis.worker.cli import main

from ..support import drop_namespace
from .router_support import Keyspace, make_context, make_reply, make_request, put_marker


async def settle_three(redis: Redis, ns: str) -> list[str]:
    """m-1 replied, m-2 failed, m-3 dead then re-driven and timed out; oldest first."""
    markers = MarkerStore(redis)
    context = make_context(ns)
    carol = make_context(ns, actor=agent("carol"))
    one, two = make_request(context, id="m-1"), make_request(carol, id="m-2")
    three = make_request(context, id="m-3")
    for ctx, request in ((context, one), (carol, two), (context, three)):
        await put_marker(redis, ctx, request)
    assert (await markers.settle_reply(ns, make_reply(one))).settled
    assert (await markers.settle_failure(ns, "m-2", state="failed",
                                         code="recipient_turn_denied")).settled
    assert (await markers.settle_failure(ns, "m-3", state="dead", code="request_dead_lettered"))
    assert await markers.redrive(ns, "m-3", deadline_ms=2**41,
                                 trace_id=three.trace_id) == "redriven"
    assert (await markers.settle_failure(ns, "m-3", state="timed_out",
                                         code="request_timed_out")).settled
    return ["m-1", "m-2", "m-3"]


@pytest.mark.anyio
async def test_recent_lists_settlements_newest_first(redis: Redis, ns: str,
                                                     keyspace: Keyspace) -> None:
    router = RedisRequestRouter(redis)
    assert await router.recent(ns) == []
    await settle_three(redis, ns)
    rows = await router.recent(ns)
    # m-3 settled twice (dead, then timed out after its re-drive): listed once, newest
    assert [(r.id, r.sender, r.recipient, r.state, r.code) for r in rows] == [
        ("m-3", "agent:bob", "agent:alice", "timed_out", "request_timed_out"),
        ("m-2", "agent:carol", "agent:alice", "failed", "recipient_turn_denied"),
        ("m-1", "agent:bob", "agent:alice", "replied", "")]
    assert all(r.purpose == "atlas-status" and r.trace_id == "trace-1" for r in rows)
    times = [datetime.fromisoformat(r.settled_at) for r in rows]
    assert times == sorted(times, reverse=True) and rows[0].settled_at.endswith("Z")
    assert [r.id for r in await router.recent(ns, limit=2)] == ["m-3", "m-2"]
    await keyspace()


@pytest.mark.anyio
async def test_recent_pages_past_repeated_ids_and_survives_a_vanished_record(
        redis: Redis, ns: str, keyspace: Keyspace) -> None:
    settled = Keys(ns).settled
    await redis.xadd(settled, {"id": "oldest", "state": "failed", "result": "runtime_failed"})
    for _ in range(150):  # more than one page of the same id
        await redis.xadd(settled, {"id": "busy", "state": "cancelled",
                                   "result": "request_cancelled"})
    await redis.xadd(settled, {"id": "gone", "state": "expired", "result": "request_expired"})
    rows = await RedisRequestRouter(redis).recent(ns, limit=3)
    assert [(r.id, r.state, r.code) for r in rows] == [
        ("gone", "expired", "request_expired"), ("busy", "cancelled", "request_cancelled"),
        ("oldest", "failed", "runtime_failed")]
    assert rows[0].sender is None and rows[0].attempts is None  # no record: nothing invented
    await keyspace()


def cli(url: str, ns: str, *args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(main, ["--redis-url", url, "--namespace", ns, *args])
    return result.exit_code, result.stdout, result.stderr


@pytest.fixture
def cli_ns(url: str) -> Iterator[str]:
    ns = f"cli-{uuid.uuid4().hex[:10]}"
    yield ns

    async def drop() -> None:
        redis = Redis.from_url(url)
        await drop_namespace(redis, ns)
        await redis.aclose()

    anyio.run(drop)


def test_recent_and_show_last_commands(url: str, cli_ns: str) -> None:
    code, _, err = cli(url, cli_ns, "show", "--last")
    assert code == 1 and err.strip() == f"error: no settled request in namespace '{cli_ns}'"
    assert cli(url, cli_ns, "recent")[1].strip() == "(none)"

    async def setup() -> None:
        redis = Redis.from_url(url)
        await settle_three(redis, cli_ns)
        await redis.aclose()

    anyio.run(setup)
    code, out, _ = cli(url, cli_ns, "recent", "--json", "--limit", "2")
    assert code == 0
    rows = json.loads(out)
    assert [(r["id"], r["state"], r["code"]) for r in rows] == [
        ("m-3", "timed_out", "request_timed_out"), ("m-2", "failed", "recipient_turn_denied")]
    code, out, _ = cli(url, cli_ns, "recent")
    header, *lines = out.strip().splitlines()
    assert header.split() == ["ID", "SENDER", "RECIPIENT", "PURPOSE", "STATE", "CODE",
                              "SETTLED_AT"]
    assert [line.split()[:5] for line in lines] == [
        ["m-3", "agent:bob", "agent:alice", "atlas-status", "timed_out"],
        ["m-2", "agent:carol", "agent:alice", "atlas-status", "failed"],
        ["m-1", "agent:bob", "agent:alice", "atlas-status", "replied"]]
    code, out, _ = cli(url, cli_ns, "show", "--last", "--json")
    assert code == 0
    events = json.loads(out)
    assert {e["messageId"] for e in events} == {"m-3"}
    assert [e["type"] for e in events] == ["request.dead_lettered", "request.redriven",
                                           "request.timed_out"]
    assert cli(url, cli_ns, "show", "--last")[1] == cli(url, cli_ns, "show", "m-3")[1]
    assert cli(url, cli_ns, "show")[0] == 2  # neither an id nor --last
    assert cli(url, cli_ns, "show", "m-1", "--last")[0] == 2
