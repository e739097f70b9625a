"""``python -m bench [--redis-url URL] [--quick]``: run every benchmark, print one table,
write ``bench/results/last.json``.

Uses its own Redis database by default (``/9``), unique namespaces, queue and stream
names per run, and deletes what it creates; every process it starts is stopped on
exit, errors and Ctrl-C.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import sys
import time
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, replace
from typing import Any

import anyio
from redis.asyncio import Redis

from sharedos_redis.observability import configure
from sharedos_redis.worker.loop import uvloop_enabled

from .bare_arq import arq_round_trip
from .cost import command_cost
from .floor import floor_round_trip
from .full_path import fake_path, full_path
from .load import sustained, worker_scaling
from .procs import RESULTS, stop_all
from .report import ratios, render, targets
from .stats import RoundTrip, measure
from .waiters import payload_of, waiters

__all__ = ["main"]

DEFAULT_URL = "redis://127.0.0.1:6379/9"


@dataclass(frozen=True)
class Sizes:
    """How many round trips each phase makes."""

    warmup: int
    sequential: int
    concurrent: int
    fake_sequential: int
    fake_concurrent: int
    cost: int
    idle_s: float
    waiters: int
    workers_total: int
    sustained_s: float
    window_s: float


FULL = Sizes(warmup=100, sequential=2000, concurrent=3000, fake_sequential=1000,
             fake_concurrent=1000, cost=500, idle_s=4.0, waiters=10_000, workers_total=2000,
             sustained_s=60.0, window_s=5.0)
QUICK = Sizes(warmup=20, sequential=200, concurrent=500, fake_sequential=100,
              fake_concurrent=200, cost=100, idle_s=1.0, waiters=1000, workers_total=300,
              sustained_s=3.0, window_s=1.0)
WORKER_COUNTS = (1, 2, 4)


class _Run:
    def __init__(self, url: str, sizes: Sizes) -> None:
        self.url, self.sizes, self.id = url, sizes, uuid.uuid4().hex[:10]
        self.payload = payload_of(200)
        self.payload_text = json.dumps(self.payload, separators=(",", ":"))
        self.measurements: dict[str, dict[str, Any]] = {}
        self.cost: dict[str, dict[str, Any]] = {}
        self.timings: dict[str, float] = {}

    @asynccontextmanager
    async def phase(self, name: str) -> AsyncIterator[None]:
        print(f"{name} ...", flush=True)
        start = time.perf_counter()
        try:
            yield
        finally:
            self.timings[name] = time.perf_counter() - start
            print(f"  {name}: {self.timings[name]:.1f}s", flush=True)

    async def bench(self, key: str, rt: RoundTrip, admin: Redis | None) -> None:
        s = self.sizes
        fake = key.startswith("fake")
        result = await measure(key, rt, warmup=s.warmup,
                               n=s.fake_sequential if fake else s.sequential,
                               total=s.fake_concurrent if fake else s.concurrent)
        self.measurements[key] = result.to_json()
        if admin is not None:
            self.cost[key] = await command_cost(admin, rt, n=s.cost, idle_s=s.idle_s)


async def _run(url: str, sizes: Sizes) -> dict[str, Any]:
    run = _Run(url, sizes)
    admin = Redis.from_url(url)
    waited: dict[str, Any] = {}
    held: dict[str, Any] = {}
    scaled: dict[str, Any] = {}
    try:
        server = (await admin.info("server"))["redis_version"]
        async with run.phase("floor"), floor_round_trip(
                url, f"bench:{run.id}:floor", run.payload_text.encode()) as rt:
            await run.bench("floor", rt, admin)
        async with run.phase("bare arq"), arq_round_trip(
                url, f"bench:{run.id}:arq", run.payload_text) as rt:
            await run.bench("arq", rt, admin)
        async with run.phase("full path"), full_path(
                url, f"bench-{run.id}", run.payload) as (_, rt):
            await run.bench("full", rt, admin)
            async with run.phase(f"sustained {sizes.sustained_s:g}s"):
                held = await sustained(rt, seconds=sizes.sustained_s, window_s=sizes.window_s)
        async with run.phase("worker processes 1, 2, 4"):
            scaled = await worker_scaling(url, f"bench-{run.id}-s", run.payload,
                                          counts=WORKER_COUNTS, warmup=sizes.warmup,
                                          total=sizes.workers_total)
        if _sdk_installed():  # right after "off", so both see the same machine
            async with run.phase("full path, OpenTelemetry on"), full_path(
                    url, f"bench-{run.id}-otel", run.payload, otel=True) as (_, rt):
                await run.bench("full_otel", rt, None)
            configure(False)  # the rows after this one measure the no-op hooks again
        async with run.phase("fakeredis"), fake_path(f"bench-{run.id}", run.payload) as rt:
            await run.bench("fake", rt, None)
        if _sdk_installed():
            async with run.phase("fakeredis, OpenTelemetry on"), fake_path(
                    f"bench-{run.id}-otel", run.payload, otel=True) as rt:
                await run.bench("fake_otel", rt, None)
            configure(False)
        async with run.phase("waiters"):
            waited = await waiters(url, f"bench-{run.id}-w", sizes.waiters)
    finally:
        await admin.aclose()
    report: dict[str, Any] = {
        "run": run.id, "redis_url": url, "redis_version": server, "sizes": sizes.__dict__,
        "measurements": run.measurements, "cost": run.cost, "waiters": waited,
        "sustained": held, "workers": scaled, "timings": run.timings}
    report["ratios"] = ratios(run.measurements)
    report["targets"] = targets(report)
    return report


def _sdk_installed() -> bool:
    if importlib.util.find_spec("opentelemetry.sdk") is None:
        print("OpenTelemetry SDK not installed: no tracing-on row", flush=True)
        return False
    return True


def main(argv: list[str] | None = None) -> int:
    """Parse arguments, run the benchmarks, print the table and write the JSON."""
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__)
    parser.add_argument("--redis-url", default=DEFAULT_URL,
                        help=f"the Redis server and database (default {DEFAULT_URL})")
    parser.add_argument("--quick", action="store_true", help="fewer round trips (< 60 s)")
    parser.add_argument("--sustained-s", type=float, default=None,
                        help="length of the sustained run (default 60, --quick 3)")
    parser.add_argument("--json", default=str(RESULTS / "last.json"), help="report path")
    args = parser.parse_args(argv)
    start = time.perf_counter()
    try:
        sizes = QUICK if args.quick else FULL
        if args.sustained_s is not None:
            sizes = replace(sizes, sustained_s=args.sustained_s)
        report = anyio.run(_run, args.redis_url, sizes,
                           backend_options={"use_uvloop": uvloop_enabled()})
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    finally:
        stop_all()
    report["timings"]["total"] = time.perf_counter() - start
    RESULTS.mkdir(parents=True, exist_ok=True)
    with open(args.json, "w", encoding="utf-8") as out:
        json.dump(report, out, indent=2)
    print(render(report))
    print(f"JSON: {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
