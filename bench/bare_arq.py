"""Bare arq: enqueue a no-op job and await its result; the worker is another process.

The requester awaits ``job.result(poll_delay=HostSettings.poll_delay_s)`` — how an
arq user waits for a job — so a round trip includes the worker's queue poll and
the requester's result poll, both every 5 ms.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import anyio
from arq import create_pool
from arq.connections import ArqRedis, RedisSettings
from arq.constants import result_key_prefix

from sharedos_redis.worker.settings import HostSettings

from .procs import running
from .stats import RoundTrip

__all__ = ["arq_round_trip"]

_POLL_S = HostSettings().poll_delay_s


async def _cleanup(pool: ArqRedis, queue: str, job_ids: list[str]) -> None:
    for start in range(0, len(job_ids), 1000):
        await pool.delete(*(result_key_prefix + j for j in job_ids[start:start + 1000]))
    await pool.delete(queue, f"{queue}:health-check")


async def _ready(rt: RoundTrip) -> None:
    """The worker answers (it needs a moment to start)."""
    with anyio.fail_after(30):
        await rt()


@asynccontextmanager
async def arq_round_trip(url: str, queue: str, payload: str) -> AsyncIterator[RoundTrip]:
    """Start the arq worker process; yield one enqueue-and-await-result round trip
    (the job receives ``payload``)."""
    pool = await create_pool(RedisSettings.from_dsn(url), default_queue_name=queue)
    job_ids: list[str] = []

    async def round_trip() -> None:
        job = await pool.enqueue_job("noop", payload, _queue_name=queue)
        assert job is not None
        job_ids.append(job.job_id)
        await job.result(timeout=10, poll_delay=_POLL_S)

    env = {"BENCH_REDIS_URL": url, "BENCH_ARQ_QUEUE": queue}
    try:
        with running(["-m", "arq", "bench.arq_worker.WorkerSettings"], env, "arq-worker"):
            started = time.perf_counter()
            await _ready(round_trip)
            print(f"  arq worker ready in {time.perf_counter() - started:.1f}s", flush=True)
            yield round_trip
    finally:
        await _cleanup(pool, queue, job_ids)
        await pool.aclose()
