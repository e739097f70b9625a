"""The reconciler ends a tree as a whole: a timed-out request's open descendants are
cancelled in the same pass, and open requests whose parent ended without its cascade
(a process died in between) on the next sweep; a dead-lettering claim cascades too."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from redis.asyncio import Redis

from sharedos_redis.router.router import RedisRequestRouter
from sharedos_redis.store.keys import Keys
from sharedos_redis.store.markers import MarkerStore
from sharedos_redis.store.tree import CASCADE_CODE
from sharedos_redis.transport.relay import OutboxRelay
from sharedos_redis.worker.host import MessagingHost
from sharedos_redis.worker.reconciler import Reconciler
from sharedos_redis.worker.turns import TurnRunner

from ..router.tree_support import build_tree
from .helpers import Clock, answer, drop_namespace, make_host

pytestmark = pytest.mark.anyio



@pytest.fixture
async def world(redis: Redis, ns: str) -> AsyncIterator[tuple[MessagingHost, Clock]]:
    host = make_host(redis, ns, {"bob": answer(None)}, claim_idle_s=1, lease_s=1)
    clock = Clock()
    host.markers = MarkerStore(redis, clock_ms=clock)
    yield host, clock
    await drop_namespace(redis, ns)


def _reconciler(host: MessagingHost) -> Reconciler:
    async def wake(namespace: str, message_id: str) -> None:
        """The wake-up of a dispatched turn (not run here)."""

    async def rewake(namespace: str, message_id: str, reason: str) -> None:
        """A re-wake (not run here)."""

    relay = OutboxRelay(host.redis, [host.namespace], wake, consumer="r1", block_ms=10,
                        claim_idle_ms=1000)
    return Reconciler(host, relay, rewake)


async def _states(host: MessagingHost, trace: str) -> dict[str, tuple[str, str | None]]:
    tree = await RedisRequestRouter(host.redis).tree(host.namespace, trace)
    return {node.id: (node.state, node.code) for node in tree.nodes}


async def test_a_timed_out_root_cancels_its_thirty_request_tree_in_one_pass(
        world: tuple[MessagingHost, Clock]) -> None:
    host, clock = world
    built = await build_tree(host.redis, host.namespace, "t-30", [3, 3, -17], root_timeout_s=5)
    reconciler = _reconciler(host)
    assert (await reconciler.reconcile_once())["timed_out"] == 0
    clock.offset_ms = 6_000  # past the root's deadline only (its descendants have 60 s)

    counts = await reconciler.reconcile_once()

    assert counts["timed_out"] == 1 and counts["cascaded"] == 29
    states = await _states(host, "t-30")
    assert states.pop("root") == ("timed_out", "request_timed_out")
    assert set(states.values()) == {("cancelled", CASCADE_CODE)} and len(states) == 29
    assert await host.redis.zcard(Keys(host.namespace).open) == 0 and len(built.ids) == 30


async def test_orphans_of_a_parent_that_ended_without_its_cascade_are_cancelled(
        world: tuple[MessagingHost, Clock]) -> None:
    host, _ = world
    built = await build_tree(host.redis, host.namespace, "t-o", [2, 2])
    middle = built.ids[1]
    # the process that ended the parent died before cascading: only the settlement ran
    await host.markers.settle_failure(host.namespace, middle, state="cancelled",
                                      code="request_cancelled")

    counts = await _reconciler(host).reconcile_once()  # its first pass sweeps the open index

    assert counts["cascaded"] == 2
    states = await _states(host, "t-o")
    assert {states[c] for c in built.children(middle)} == {("cancelled", CASCADE_CODE)}
    assert {states[c][0] for c in built.descendants(built.ids[2])} == {"accepted"}


async def test_a_dead_lettering_claim_cancels_the_dead_requests_descendants(
        world: tuple[MessagingHost, Clock]) -> None:
    host, clock = world
    built = await build_tree(host.redis, host.namespace, "t-d", [2])
    clock.offset_ms = 200_000  # root's lease (120 s, taken by the builder) expired
    runner = TurnRunner(host, worker="w")
    for _ in range(host.settings.max_attempts - 1):  # the builder's claim was attempt 1
        claim = await host.markers.claim_turn(host.namespace, "root", lease_ms=1,
                                              max_attempts=host.settings.max_attempts,
                                              worker="w")
        clock.offset_ms += 10
        if claim.outcome == "dead":
            break
    assert claim.outcome != "dead"  # attempts left: the runner's claim dead-letters it
    clock.offset_ms += 10

    assert await runner.run(host.namespace, "root") == "dead"

    states = await _states(host, "t-d")
    assert states.pop("root") == ("dead", "request_dead_lettered")
    assert set(states.values()) == {("cancelled", CASCADE_CODE)} and len(built.ids) == 3
