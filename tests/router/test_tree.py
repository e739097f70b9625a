"""router.tree: a trace's delegation tree from the recorded parents, in one pipelined read;
the cascade that ends an ended request's open descendants."""

from __future__ import annotations

from typing import Any

import pytest
from redis.asyncio import Redis
from redis.asyncio.client import Pipeline

from sharedos_redis.router.router import RedisRequestRouter
from sharedos_redis.router.tree import _accept_order
from sharedos_redis.store.audit import RedisAuditSink
from sharedos_redis.store.keys import Keys
from sharedos_redis.store.markers import MarkerStore
from sharedos_redis.store.tree import CASCADE_CODE, RequestRecord
from sharedos_redis.transport.turn_scope import child_id

from ..support import drop_namespace
from .tree_support import build_tree, reply, reply_refused

pytestmark = pytest.mark.anyio


@pytest.fixture(autouse=True)
async def _cleanup(redis: Redis, ns: str) -> Any:
    yield
    await drop_namespace(redis, ns)


async def test_the_tree_links_parents_to_children_in_call_order(redis: Redis, ns: str) -> None:
    built = await build_tree(redis, ns, "t-1", [3, -1])
    await reply(redis, ns, built.envelope[built.ids[2]])  # a1-1: replied
    await MarkerStore(redis).settle_failure(ns, built.ids[1], state="failed",
                                            code="recipient_turn_failed")

    tree = await RedisRequestRouter(redis).tree(ns, "t-1")

    assert [n.id for n in tree.nodes] == built.ids
    root = tree.nodes[0]
    assert tree.roots == [root] and root.parent is None
    assert root.children == tuple(child_id("root", k) for k in (1, 2, 3))  # call order
    assert (root.sender, root.recipient, root.purpose, root.state, root.attempt) == (
        "agent:bob", "agent:a0", "plan the week", "running", 1)
    first, second, third = (tree.node(c) for c in root.children)
    assert first is not None and second is not None and third is not None
    assert (first.recipient, first.state, first.code, first.attempt) == (
        "agent:a1-0", "failed", "recipient_turn_failed", 1)
    assert (second.state, second.code, second.attempt) == ("replied", None, 0)
    assert third.state == "accepted" and third.children == ()
    assert first.children == (child_id(first.id, 1),)  # a1-0's turn asked one more
    assert all(n.trace_id == "t-1" for n in tree.nodes)
    assert first.duration_ms == first.updated_ms - first.created_ms  # ended: fixed
    assert third.duration_ms == tree.now_ms - third.created_ms  # open: so far
    assert [(d, n.id) for d, n in tree.walk()] == [
        (0, "root"), (1, first.id), (2, first.children[0]), (1, second.id), (1, third.id)]


def _record(message_id: str, parent: str | None, created_ms: int) -> RequestRecord:
    return RequestRecord(id=message_id, parent=parent, sender="agent:bob", recipient="agent:a",
                         purpose="step", trace_id="t", state="accepted", attempt=0,
                         created_ms=created_ms, updated_ms=created_ms,
                         deadline_ms=created_ms + 60_000, code=None)


async def test_requests_accepted_in_one_millisecond_keep_their_accept_order() -> None:
    """The trace index orders ties by id; the tree puts parents first, then children by
    their parent's place and their turn's call order (a fast host accepts many per ms)."""
    a1, a2 = child_id("root", 1), child_id("root", 2)
    b1, b2, c1 = child_id(a1, 1), child_id(a1, 2), child_id(a2, 1)
    accepted = [_record("root", None, 5), _record(a1, "root", 5), _record(a2, "root", 5),
                _record(b1, a1, 5), _record(b2, a1, 5), _record(c1, a2, 5),
                _record("later", None, 6)]
    for scrambled in (sorted(accepted, key=lambda r: r.id), list(reversed(accepted))):
        assert [r.id for r in _accept_order(scrambled)] == [r.id for r in accepted]


async def test_an_unknown_trace_is_an_empty_tree(redis: Redis, ns: str) -> None:
    tree = await RedisRequestRouter(redis).tree(ns, "no-such-trace")
    assert tree.nodes == () and tree.roots == []


async def test_thirty_requests_are_read_in_one_pipeline(redis: Redis, ns: str,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    built = await build_tree(redis, ns, "t-30", [3, 3, -17])
    assert len(built.ids) == 30
    router = RedisRequestRouter(redis)
    await router.tree(ns, "t-30")  # the clock script is loaded (SCRIPT LOAD) once
    calls: list[str] = []
    plain, piped = redis.execute_command, Pipeline.execute

    async def command(*args: Any, **options: Any) -> Any:
        calls.append(str(args[0]))
        return await plain(*args, **options)

    async def pipeline(self: Pipeline, *args: Any, **options: Any) -> Any:
        calls.append(f"pipeline of {len(self.command_stack)}")
        return await piped(self, *args, **options)

    monkeypatch.setattr(redis, "execute_command", command)
    monkeypatch.setattr(Pipeline, "execute", pipeline)
    tree = await router.tree(ns, "t-30")

    assert len(tree.nodes) == 30
    assert calls == ["EVALSHA", "ZRANGE", "pipeline of 30"]  # server clock, index, records


async def test_cancelling_the_root_cancels_every_open_descendant(redis: Redis, ns: str) -> None:
    built = await build_tree(redis, ns, "t-c", [3, 3, -17])
    done_leaf = built.descendants(built.ids[1])[-1]
    await reply(redis, ns, built.envelope[done_leaf])  # ended before: stays replied
    router = RedisRequestRouter(redis)

    settlement = await router.cancel(ns, "root")

    assert settlement.settled
    tree = await router.tree(ns, "t-c")
    states = {n.id: (n.state, n.code) for n in tree.nodes}
    assert states.pop("root") == ("cancelled", "request_cancelled")
    assert states.pop(done_leaf) == ("replied", None)
    assert set(states.values()) == {("cancelled", CASCADE_CODE)}
    k = Keys(ns)
    assert await redis.zcard(k.open) == 0 and await redis.zcard(k.leases) == 0
    events = [e for _, e in await RedisAuditSink(redis).read(ns, count=10_000)
              if e.type == "request.cancelled" and e.reason == CASCADE_CODE]
    assert sorted(e.message_id or "" for e in events) == sorted(states)
    assert {(e.metadata or {}).get("cascadeRoot") for e in events} == {"root"}
    cascaded = {e.message_id: e for e in events}
    # attributed to each request's own requester, not to whoever cancelled the root
    leaf = built.descendants(built.ids[3])[-1]
    assert cascaded[leaf].actor == built.envelope[leaf].sender
    settled = [f for _, f in await redis.xrange(k.settled)]
    assert sum(f.get(b"result") == CASCADE_CODE.encode() for f in settled) == len(states)
    # a turn that finishes after its request was cascaded settles nothing
    late = await reply_refused(redis, ns, built.envelope[leaf])
    assert (late.code, late.state) == ("request_closed", "cancelled")


async def test_a_cascade_reaches_only_the_ended_requests_subtree(redis: Redis, ns: str) -> None:
    built = await build_tree(redis, ns, "t-s", [2, 2, 2])
    middle = built.ids[1]
    markers = MarkerStore(redis)
    await markers.settle_failure(ns, middle, state="timed_out", code="request_timed_out")

    cancelled = await markers.cascade(ns, middle)

    assert sorted(cancelled) == sorted(built.descendants(middle))
    tree = await RedisRequestRouter(redis).tree(ns, "t-s")
    outside = set(built.ids) - {middle, *built.descendants(middle)}
    assert all(tree.node(mid).open for mid in outside)  # type: ignore[union-attr]
    assert await markers.cascade(ns, middle) == []  # nothing left: idempotent


async def test_an_open_request_does_not_cascade(redis: Redis, ns: str) -> None:
    built = await build_tree(redis, ns, "t-o", [2])
    assert await MarkerStore(redis).cascade(ns, "root") == []
    assert await MarkerStore(redis).cascade(ns, "unknown") == []
    tree = await RedisRequestRouter(redis).tree(ns, "t-o")
    assert [n.state for n in tree.nodes] == ["running", "accepted", "accepted"]
    assert len(built.ids) == 3


async def test_cancelling_a_request_whose_turn_never_ran_reads_no_tree(
        redis: Redis, ns: str, monkeypatch: pytest.MonkeyPatch) -> None:
    built = await build_tree(redis, ns, "t-n", [3])
    router = RedisRequestRouter(redis)
    await router.cancel(ns, built.ids[1])  # scripts loaded
    calls: list[str] = []
    plain = redis.execute_command

    async def command(*args: Any, **options: Any) -> Any:
        calls.append(str(args[0]))
        return await plain(*args, **options)

    monkeypatch.setattr(redis, "execute_command", command)
    await router.cancel(ns, built.ids[2])
    assert calls == ["EVALSHA", "HMGET"]  # the settlement, then attempts = 0: no children
