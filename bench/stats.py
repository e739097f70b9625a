"""Latency and throughput measurement of one async round trip; no Redis here."""

from __future__ import annotations

import math
import time
from collections.abc import Awaitable, Callable
from dataclasses import asdict, dataclass
from typing import Any

import anyio

__all__ = ["Measurement", "RoundTrip", "measure", "percentile"]

RoundTrip = Callable[[], Awaitable[None]]
"""One complete request/reply; raises if the reply is not the expected one."""


def percentile(sorted_values: list[float], q: float) -> float:
    """Nearest-rank percentile ``q`` (0-100) of an ascending list."""
    if not sorted_values:
        return float("nan")
    rank = max(0, min(len(sorted_values) - 1, math.ceil(q / 100 * len(sorted_values)) - 1))
    return sorted_values[rank]


@dataclass
class Measurement:
    """Sequential latencies (ms) and throughput with ``concurrency`` requesters."""

    name: str
    sequential: int
    p50_ms: float
    p90_ms: float
    p99_ms: float
    mean_ms: float
    concurrency: int
    concurrent: int
    rt_per_s: float
    seconds: float

    def to_json(self) -> dict[str, Any]:
        """A plain dict for the JSON report."""
        return asdict(self)


async def _sequential(rt: RoundTrip, n: int) -> list[float]:
    samples: list[float] = []
    for _ in range(n):
        start = time.perf_counter()
        await rt()
        samples.append((time.perf_counter() - start) * 1000)
    return sorted(samples)


async def _concurrent(rt: RoundTrip, total: int, concurrency: int) -> float:
    """Seconds for ``concurrency`` requesters to complete ``total`` round trips."""
    per_task = max(1, total // concurrency)

    async def requester() -> None:
        for _ in range(per_task):
            await rt()

    start = time.perf_counter()
    async with anyio.create_task_group() as tg:
        for _ in range(concurrency):
            tg.start_soon(requester)
    return time.perf_counter() - start


async def measure(name: str, rt: RoundTrip, *, warmup: int, n: int, total: int,
                  concurrency: int = 50) -> Measurement:
    """Warm up, then ``n`` sequential round trips, then ``total`` with ``concurrency``."""
    start = time.perf_counter()
    for _ in range(warmup):
        await rt()
    samples = await _sequential(rt, n)
    per_task = max(1, total // concurrency)
    elapsed = await _concurrent(rt, total, concurrency)
    done = per_task * concurrency
    mean = sum(samples) / len(samples) if samples else float("nan")
    return Measurement(
        name=name, sequential=n, p50_ms=percentile(samples, 50), p90_ms=percentile(samples, 90),
        p99_ms=percentile(samples, 99), mean_ms=mean,
        concurrency=concurrency, concurrent=done, rt_per_s=done / elapsed,
        seconds=time.perf_counter() - start)
