"""Crash matrix: every fault point of ``sharedos_redis.faults``, on real processes.

For each step, the process that owns it (a worker, or a requester process) runs
with ``SHAREDOS_FAULT=<step>`` and exits 77 there; what died is restarted without
the fault. Then: the request reached exactly one terminal state, one settlement
entry and (when replied) one ``reply.settled`` event exist, the requester — or a
restarted requester re-checking by message id — saw the reply, and the audit
timeline tells how many turns ran. Real Redis only, then the same rows on a local
3-primary Redis Cluster (where ``sharedos-redis worker`` runs the stream worker);
marked slow.
"""

from __future__ import annotations

from typing import Any

import anyio
import pytest
from redis.asyncio import Redis

from sharedos_redis.faults import FAULT_EXIT_CODE, FAULT_POINTS
from sharedos_redis.store.keys import TERMINAL_STATES

from . import fault_app
from .inspect_ns import event_counts, message_ids, settlements, states
from .outcomes import ROWS, Row
from .procs import Procs

pytestmark = [pytest.mark.anyio, pytest.mark.slow]


@pytest.fixture
def url(deployment_url: str) -> str:
    """Every row on single Redis (arq worker) and on the local cluster (stream worker)."""
    return deployment_url


REQUESTER_STEPS = ("accept.after", "listener.before_wake")
TURNS_STARTED = {"turn.after_claim": 2, "turn.before_settle": 2}
"""Turns a step's crash costs: a claimed lease that dies re-runs once; others run once."""
RACING_STEPS = {"reconciler.between": (1, 2)}
"""Steps whose crash may come before or after the worker claimed the turn (the worker is
ready once its route lease is up, which can be before its first reconciler pass): the turn
runs once, or its lease dies with the worker and it re-runs once."""


def test_every_fault_point_is_covered() -> None:
    assert set(REQUESTER_STEPS) <= set(FAULT_POINTS)
    assert len(FAULT_POINTS) == len(set(FAULT_POINTS)) == 9


async def _worker_fault(procs: Procs, step: str) -> dict[str, Any]:
    faulty = procs.worker(fault=step)
    await procs.ready("alice")
    requester = procs.requester("send")
    assert await procs.wait(faulty, 30) == FAULT_EXIT_CODE, procs.logs()
    procs.worker()
    return await procs.outcome(requester, 45)


async def _requester_fault(procs: Procs, client: Redis, ns: str, step: str) -> dict[str, Any]:
    # a turn slower than the requester's own path to its wait, so the settlement always
    # reaches the waiter through the listener (listener.before_wake), not its first check
    procs.worker(FAULT_TURN_DELAY_S="0.3")
    await procs.ready("alice")
    faulty = procs.requester("send", fault=step)
    assert await procs.wait(faulty, 30) == FAULT_EXIT_CODE, procs.logs()
    ids = await message_ids(client, ns)
    assert len(ids) == 1, ids
    return await procs.outcome(procs.requester("check", ids[0]), 45)


@pytest.mark.parametrize("step", FAULT_POINTS)
async def test_crash_at_fault_point_settles_exactly_once(
        step: str, client: Redis, fault_ns: str, procs: Procs) -> None:
    host = fault_app.build(client, fault_ns)
    await fault_app.grant_all(host, [fault_app.REQUESTER], ["alice"])
    with anyio.fail_after(90):
        if step in REQUESTER_STEPS:
            outcome, seen_by = await _requester_fault(procs, client, fault_ns, step), "restarted"
        else:
            outcome, seen_by = await _worker_fault(procs, step), "requester"
    ids = await message_ids(client, fault_ns)
    assert len(ids) == 1, ids
    mid = ids[0]
    state = (await states(client, fault_ns, ids))[mid]
    settled = (await settlements(client, fault_ns))[mid]
    events = await event_counts(host, mid)
    ROWS.append(Row(fault=step, requests=1, settled=int(state in TERMINAL_STATES),
                    lost=int(state not in TERMINAL_STATES or outcome["status"] != "succeeded"),
                    duplicated=max(0, settled - 1), states=str(state), seen_by=seen_by))
    assert state == "replied", (outcome, procs.logs())
    assert settled == 1 and events["reply.settled"] == 1, events
    assert events["message.accepted"] == 1
    expected = RACING_STEPS.get(step, (TURNS_STARTED.get(step, 1),))
    assert events["turn.started"] in expected, events
    assert outcome["status"] == "succeeded", outcome
    assert outcome["output"]["echo"] == {"q": "status?"}
    assert outcome["output"]["by"] == "alice"
    assert outcome["output"]["attempt"] == events["turn.started"]  # the reply is the last run
