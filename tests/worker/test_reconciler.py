"""The reconciler repairs what crashes leave behind: lost jobs, expired leases, deadlines."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator

import pytest
from redis.asyncio import Redis

from sharedos_redis.kernel.contracts import MessageEnvelope, agent, format_timestamp
from sharedos_redis.store.markers import MarkerStore
from sharedos_redis.transport.relay import OutboxRelay
from sharedos_redis.worker.host import MessagingHost
from sharedos_redis.worker.reconciler import Reconciler

from .helpers import Clock, answer, drop_namespace, make_host

pytestmark = [pytest.mark.anyio, pytest.mark.usefixtures("served")]  # no worker runs



@pytest.fixture
async def world(redis: Redis, ns: str) -> AsyncIterator[tuple[MessagingHost, Clock]]:
    host = make_host(redis, ns, {"bob": answer(None), "alice": answer("hi")},
                     claim_idle_s=1, lease_s=1)
    clock = Clock()
    host.markers = MarkerStore(redis, clock_ms=clock)
    yield host, clock
    await drop_namespace(redis, ns)


async def _accept(host: MessagingHost) -> str:
    context = host.context_for("bob", purpose="p", trace_id=f"t-{time.time_ns()}")
    envelope = MessageEnvelope(id=f"m-{time.time_ns()}", sender=agent("bob"),
                               receiver=agent("alice"), purpose="p", payload={},
                               trace_id=context.trace_id, created_at=format_timestamp())
    receipt = await host.transport.deliver(context, envelope)
    assert receipt.status == "accepted"
    return envelope.id


def _reconciler(host: MessagingHost, woken: list[tuple[str, str]]) -> Reconciler:
    async def lost(namespace: str, message_id: str) -> None:
        """A wake-up whose job is lost (the arq job vanished)."""

    async def rewake(namespace: str, message_id: str, reason: str) -> None:
        woken.append((message_id, reason))

    relay = OutboxRelay(host.redis, [host.namespace], lost, consumer="r1", block_ms=10,
                        claim_idle_ms=1000)
    return Reconciler(host, relay, rewake)


async def test_lost_job_is_woken_again(world: tuple[MessagingHost, Clock]) -> None:
    host, clock = world
    woken: list[tuple[str, str]] = []
    reconciler = _reconciler(host, woken)
    await reconciler.relay.ensure_groups()
    message_id = await _accept(host)
    assert await reconciler.relay.step(block_ms=10) == 1  # dispatched, job lost
    assert (await reconciler.reconcile_once())["rewoken"] == 0  # not stale yet
    clock.offset_ms = 5_000
    reconciler._next_stale_scan = 0.0
    assert (await reconciler.reconcile_once())["rewoken"] == 1
    assert woken == [(message_id, "stale")]


async def test_expired_lease_reruns_then_dead_letters(world: tuple[MessagingHost, Clock]) -> None:
    host, clock = world
    woken: list[tuple[str, str]] = []
    reconciler = _reconciler(host, woken)
    message_id = await _accept(host)
    claim = await host.markers.claim_turn(host.namespace, message_id, lease_ms=1000,
                                          max_attempts=2, worker="w1")
    assert claim.outcome == "claimed" and claim.attempt == 1
    assert (await reconciler.reconcile_once())["rerun"] == 0  # lease still live
    clock.offset_ms = 2_000  # the worker died: its lease expired
    assert (await reconciler.reconcile_once())["rerun"] == 1
    assert woken[-1] == (message_id, "lease")
    again = await host.markers.claim_turn(host.namespace, message_id, lease_ms=1000,
                                          max_attempts=2, worker="w2")
    assert again.outcome == "claimed" and again.attempt == 2
    clock.offset_ms = 4_000
    assert (await reconciler.reconcile_once())["rerun"] == 1
    dead = await host.markers.claim_turn(host.namespace, message_id, lease_ms=1000,
                                         max_attempts=2, worker="w3")
    assert dead.outcome == "dead"
    letters = await host.markers.dead_letters(host.namespace)
    assert [(d["id"], d["reason"]) for d in letters] == [(message_id, "request_dead_lettered")]


async def test_overdue_request_times_out_once(world: tuple[MessagingHost, Clock]) -> None:
    host, clock = world
    reconciler = _reconciler(host, [])
    message_id = await _accept(host)
    clock.offset_ms = 11_000  # past the 10 s request deadline
    assert (await reconciler.reconcile_once())["timed_out"] == 1
    assert (await reconciler.reconcile_once())["timed_out"] == 0  # terminal never changes
    state, code = await host.markers.fields(host.namespace, message_id, ["state", "code"])
    assert (state, code) == ("timed_out", "request_timed_out")
