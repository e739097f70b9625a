"""Sustained load: request/replies across 50 agents, two worker processes, one of
them SIGKILLed and restarted at random twice. All settle, none lost, none twice.

``SHAREDOS_LOAD_REQUESTS`` sets the count: CI (``.ci/run``) runs the full 10,000;
the local default is 2,000 (about 40 s on 2 cores). Real Redis only; slow.
"""

from __future__ import annotations

import os
import random
import time
from collections import Counter

import anyio
import pytest
from redis.asyncio import Redis

from sharedos_redis.store.audit import entry_wires
from sharedos_redis.store.keys import Keys
from sharedos_redis.worker.host import MessagingHost

from . import fault_app
from .inspect_ns import message_ids, states
from .outcomes import ROWS, Row
from .procs import Procs
from .requester import ask

pytestmark = [pytest.mark.anyio, pytest.mark.slow]
AGENTS = 50
REQUESTS = int(os.environ.get("SHAREDOS_LOAD_REQUESTS", "2000"))


async def _settled_events(redis: Redis, ns: str) -> tuple[Counter[str], int]:
    """reply.settled audit events per message id, and the audit stream's length."""
    counts: Counter[str] = Counter()
    last = "-"
    while True:
        page = await redis.xrange(Keys(ns).audit, last, "+", count=5000)
        for _entry_id, fields in page:
            for wire in entry_wires(fields):
                if wire.get("type") == "reply.settled":
                    counts[wire["messageId"]] += 1
        if len(page) < 5000:
            return counts, int(await redis.xlen(Keys(ns).audit))
        last = "(" + page[-1][0].decode()


class Progress:
    """Outcomes so far; ``reached(n)`` waits until ``n`` requests have ended."""

    def __init__(self) -> None:
        self.done: list[str] = []
        self._marks: dict[int, anyio.Event] = {}

    def record(self, outcome: str) -> None:
        self.done.append(outcome)
        event = self._marks.get(len(self.done))
        if event is not None:
            event.set()

    async def reached(self, n: int) -> None:
        if len(self.done) < n:
            await self._marks.setdefault(n, anyio.Event()).wait()


async def _drive(host: MessagingHost, names: list[str], progress: Progress) -> None:
    per_agent = REQUESTS // AGENTS

    async def agent_loop(i: int) -> None:
        sender, recipient = names[i], names[(i + 1) % AGENTS]
        for n in range(per_agent):
            result = await ask(host, recipient, {"n": n}, sender=sender)
            progress.record(result.status if result.status == "succeeded" else
                            f"{result.status}:{(result.error.details or {}).get('outcome')}")

    async with anyio.create_task_group() as tg:
        for i in range(AGENTS):
            tg.start_soon(agent_loop, i)


async def _chaos(procs: Procs, workers: list[object], progress: Progress) -> None:
    rng = random.Random(os.environ.get("SHAREDOS_LOAD_SEED", "7"))
    for fraction in sorted(rng.uniform(0.15, 0.75) for _ in range(2)):
        await progress.reached(int(fraction * REQUESTS))
        victim = rng.randrange(len(workers))
        procs.kill(workers[victim])  # type: ignore[arg-type]
        workers[victim] = procs.worker(FAULT_AGENTS=str(AGENTS))


async def test_sustained_load_with_worker_kills(client: Redis, fault_ns: str,
                                                procs: Procs) -> None:
    host = fault_app.build(client, fault_ns, agents=AGENTS, request_timeout_s=30,
                           turn_timeout_s=10)
    names = fault_app.agent_names(AGENTS)[1:]
    await fault_app.grant_all(host, names, names)
    workers: list[object] = [procs.worker(FAULT_AGENTS=str(AGENTS)) for _ in range(2)]
    await procs.ready(*names)
    progress = Progress()
    done = progress.done
    started = time.monotonic()
    async with host:
        with anyio.fail_after(600):
            async with anyio.create_task_group() as tg:
                tg.start_soon(_chaos, procs, workers, progress)
                await _drive(host, names, progress)
    elapsed = time.monotonic() - started
    ids = await message_ids(client, fault_ns)
    final = Counter((await states(client, fault_ns, ids)).values())
    settled, audit_len = await _settled_events(client, fault_ns)
    twice = sum(1 for count in settled.values() if count > 1)
    total = (REQUESTS // AGENTS) * AGENTS
    print(f"\nload: {total} requests in {elapsed:.1f}s = {total / elapsed:.0f} req/s; "
          f"states {dict(final)}; outcomes {dict(Counter(done))}; audit {audit_len}")
    ROWS.append(Row(fault=f"load {total} + 2 worker SIGKILLs", requests=total,
                    settled=sum(n for st, n in final.items() if st in {"replied", "failed",
                                "timed_out", "cancelled", "dead"}),
                    lost=total - len(done) + sum(n for st, n in final.items()
                                                 if st in {"accepted", "dispatched", "running"}),
                    duplicated=twice, states=str(dict(final)),
                    seen_by=f"requester, {total / elapsed:.0f} req/s"))
    assert len(done) == total and len(ids) == total
    assert final == Counter({"replied": total}), final
    assert Counter(done) == Counter({"succeeded": total})
    assert twice == 0
