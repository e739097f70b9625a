"""The tick scheduler: the host owns scheduling, SharedOS runs one turn at a time.

Every tick: bob's heartbeat asks alice for the Atlas status (alice consults
carol first), eve tries to reach alice and is refused, and a ping-pong pair
bounces until the trace budget stops it. Then: the pending table and an audit
summary (allowed/denied counts by reason).
"""

from __future__ import annotations

import json
import random
from collections import Counter

from sharedos_redis.kernel.contracts import ExecutionResult
from sharedos_redis.worker.host import MessagingHost

from .transcript import Transcript

__all__ = ["audit_summary", "run_ticks"]


def _ending(result: ExecutionResult) -> str:
    if result.status == "succeeded":
        return "succeeded " + json.dumps(result.output, separators=(",", ":"))[:150]
    error = getattr(result, "error", None)
    return f"{result.status} {error.code if error else ''}".strip()


async def run_ticks(host: MessagingHost, transcript: Transcript, *, ticks: int, seed: int,
                    ping_pong_hops: int = 4) -> list[ExecutionResult]:
    """Run ``ticks`` scheduler ticks; returns every root turn's result."""
    rng = random.Random(seed)
    results: list[ExecutionResult] = []
    for tick in range(1, ticks + 1):
        transcript.say(f"tick {tick}")
        jobs = [
            ("bob", "atlas-status", {"heartbeat": tick}, None),
            ("eve", "atlas-status", {"tick": tick}, None),
            ("ping", "rally", {"serve": tick}, ping_pong_hops),
        ]
        rng.shuffle(jobs)  # the seed only changes the order turns start in
        for agent_id, purpose, payload, hops in jobs:
            transcript.say(f"  {agent_id}'s turn [{purpose}]")
            result = await host.start_turn(agent_id, payload, purpose=purpose, hops=hops)
            transcript.say(f"  {agent_id}'s turn ended: {_ending(result)}")
            results.append(result)
    return results


async def audit_summary(host: MessagingHost) -> Counter[tuple[str, str, str]]:
    """Counts of (event type, outcome, reason) over the namespace's audit stream."""
    counts: Counter[tuple[str, str, str]] = Counter()
    after = "-"
    while True:
        batch = await host.audit.read(host.namespace, count=1000, after=after)
        if not batch:
            return counts
        for _, event in batch:
            why = " / ".join(part for part in (event.reason, event.cause) if part)
            counts[(event.type, event.outcome, why)] += 1
        after = batch[-1][0]
