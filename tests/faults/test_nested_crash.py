"""Crash-matrix rows with nesting (issue 12): bob → alice → carol on real processes.

``req`` (bob) asks alice; alice's turn asks carol before it answers. The worker running
alice's turn dies hard (``SHAREDOS_FAULT``, ``os._exit`` like a SIGKILL):

- ``accept.after``: right after alice's nested request to carol was accepted;
- ``listener.before_wake``: after that request settled (carol replied), before alice's
  waiter woke.

A worker without the fault takes over; alice's turn runs again (attempt 2) and its same
call re-attaches to the request attempt 1 started. Then: bob gets exactly one reply,
carol's turn ran once, and each edge spent exactly one hop (the trace budget) and one
``maxUses`` use (the usage hash). Real Redis, then the local cluster; marked slow.
"""

from __future__ import annotations

import anyio
import pytest
from redis.asyncio import Redis

from sharedos_redis.faults import FAULT_EXIT_CODE
from sharedos_redis.store.keys import TERMINAL_STATES, Keys
from sharedos_redis.transport.turn_scope import child_id
from tests.worker.helpers import invoke_grant, put, send_grant

from . import fault_app
from .inspect_ns import event_counts, message_ids, settlements, states
from .outcomes import ROWS, Row
from .procs import Procs

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

BOB, ALICE, CAROL = fault_app.REQUESTER, "alice", fault_app.NESTED


@pytest.fixture
def url(deployment_url: str) -> str:
    """Every row on single Redis (arq worker) and on the local cluster (stream worker)."""
    return deployment_url


@pytest.mark.parametrize("step", ["accept.after", "listener.before_wake"])
async def test_a_nested_request_survives_its_requesters_crash(
        step: str, client: Redis, fault_ns: str, procs: Procs) -> None:
    host = fault_app.build(client, fault_ns)
    edges = [send_grant(fault_ns, BOB, ALICE, max_uses=10),
             send_grant(fault_ns, ALICE, CAROL, max_uses=10)]
    await put(host, *edges, invoke_grant(fault_ns, ALICE), invoke_grant(fault_ns, CAROL))
    with anyio.fail_after(90):
        faulty = procs.worker(fault=step)
        await procs.ready(ALICE, CAROL)
        requester = procs.requester("nested")
        assert await procs.wait(faulty, 30) == FAULT_EXIT_CODE, procs.logs()
        procs.worker()
        outcome = await procs.outcome(requester, 45)

    root = outcome["message_id"]
    child = child_id(root, 1)
    ids = await message_ids(client, fault_ns)
    assert sorted(ids) == sorted([root, child]), ids  # alice's attempt 2 made no new request
    terminal = await states(client, fault_ns, ids)
    settled = await settlements(client, fault_ns)
    root_events, child_events = await event_counts(host, root), await event_counts(host, child)
    ROWS.append(Row(fault=f"nested: alice's worker at {step}", requests=2,
                    settled=sum(state in TERMINAL_STATES for state in terminal.values()),
                    lost=int(outcome["status"] != "succeeded"),
                    duplicated=sum(max(0, n - 1) for n in settled.values()),
                    states="/".join(str(terminal[i]) for i in (root, child)),
                    seen_by="requester"))
    # bob gets exactly one reply: alice's second attempt, carrying carol's first
    assert outcome["status"] == "succeeded", (outcome, procs.logs())
    assert outcome["output"]["by"] == ALICE and outcome["output"]["attempt"] == 2
    # carol ran once: attempt 2 re-attached. Only at accept.after may the dying worker
    # itself have claimed carol's turn first (its relay can read the entry before the accept
    # returns); then that claim died with it and the other worker ran carol's turn again,
    # and the reply bob gets carries carol's attempt 2.
    claims = [e.metadata or {} for e in await host.router.timeline(fault_ns, child)
              if e.type == "turn.started"]
    assert len(claims) == 1 or (step == "accept.after" and len(claims) == 2
                                and claims[0]["worker"].endswith(f"-{faulty.pid}")), claims
    assert outcome["output"]["nested"] == {"echo": {"q": "status?"}, "by": CAROL,
                                           "attempt": len(claims)}
    assert terminal == {root: "replied", child: "replied"}
    assert settled == {root: 1, child: 1}
    assert root_events["reply.settled"] == child_events["reply.settled"] == 1
    assert root_events["turn.started"] == 2  # alice ran again after the crash
    assert child_events["message.accepted"] == 1 and child_events["message.replayed"] == 1
    # one hop and one use per edge
    keys = Keys(fault_ns)
    trace = await client.hget(keys.message(root), "trace")
    assert trace is not None
    hops = await client.get(keys.budget(trace.decode()))
    assert int(hops) == host.settings.default_budget_hops - 2
    usage = await client.hgetall(keys.usage)
    assert {k.decode(): int(v) for k, v in usage.items()} == {edges[0].id: 1, edges[1].id: 1}
