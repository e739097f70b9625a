"""Throughput with 1, 2 and 4 worker processes, and a sustained run over time.

``worker_scaling``: for each worker count, the full path's worker processes
(``sharedos_redis.worker.cli worker --app bench.app:host``, one namespace) serve
``concurrency`` requesters of this process for ``total`` round trips.
``sustained``: ``concurrency`` requesters run for ``seconds``; every round trip's
latency is kept with its completion time and reported per ``window_s`` window
(p50, p99, round trips per second), so a drift over time shows.
"""

from __future__ import annotations

import time
from typing import Any

import anyio

from sharedos_redis.kernel.contracts import JsonValue

from .full_path import full_path
from .stats import RoundTrip, measure, percentile

__all__ = ["sustained", "worker_scaling"]


async def worker_scaling(url: str, namespace: str, payload: JsonValue, *,
                         counts: tuple[int, ...], warmup: int, total: int,
                         concurrency: int = 50) -> dict[str, dict[str, Any]]:
    """Round trips per second with each number of worker processes (one run each)."""
    rows: dict[str, dict[str, Any]] = {}
    for count in counts:
        async with full_path(url, f"{namespace}-w{count}", payload, workers=count) as (_, rt):
            result = await measure(f"workers_{count}", rt, warmup=warmup, n=0, total=total,
                                   concurrency=concurrency)
        rows[str(count)] = {"workers": count, "concurrency": concurrency,
                            "round_trips": result.concurrent,
                            "rt_per_s": round(result.rt_per_s, 1)}
    return rows


async def sustained(rt: RoundTrip, *, seconds: float, window_s: float,
                    concurrency: int = 50) -> dict[str, Any]:
    """``concurrency`` requesters for ``seconds``; p50/p99 and throughput per window."""
    done: list[tuple[float, float]] = []  # (completion offset s, latency ms)
    start = time.perf_counter()
    end = start + seconds

    async def requester() -> None:
        while (began := time.perf_counter()) < end:
            await rt()
            now = time.perf_counter()
            done.append((now - start, (now - began) * 1000))

    async with anyio.create_task_group() as tg:
        for _ in range(concurrency):
            tg.start_soon(requester)
    windows: list[dict[str, Any]] = []
    edge = 0.0
    while edge < seconds:
        latencies = sorted(ms for at, ms in done if edge <= at < edge + window_s)
        windows.append({"from_s": round(edge, 1), "n": len(latencies),
                        "p50_ms": round(percentile(latencies, 50), 2),
                        "p99_ms": round(percentile(latencies, 99), 2),
                        "rt_per_s": round(len(latencies) / window_s, 1)})
        edge += window_s
    every = sorted(ms for _, ms in done)
    return {"seconds": seconds, "window_s": window_s, "concurrency": concurrency,
            "n": len(every), "p50_ms": round(percentile(every, 50), 2),
            "p99_ms": round(percentile(every, 99), 2),
            "rt_per_s": round(len(every) / (time.perf_counter() - start), 1),
            "windows": windows}
