"""The bare-arq worker process: ``python -m arq bench.arq_worker.WorkerSettings``.

Configured by environment (BENCH_REDIS_URL, BENCH_ARQ_QUEUE). Same poll delay and
concurrency as sharedos-redis's ``HostSettings`` defaults; a no-op job.
"""

from __future__ import annotations

import os
from typing import Any, ClassVar

from arq.connections import RedisSettings
from arq.worker import func

from sharedos_redis.worker.settings import HostSettings

__all__ = ["WorkerSettings", "noop"]

_SETTINGS = HostSettings()


async def noop(ctx: dict[str, Any], payload: str) -> None:
    """The job: nothing (it receives the request payload)."""


class WorkerSettings:
    """arq settings for the bare-arq benchmark worker."""

    functions: ClassVar[list[Any]] = [func(noop, name="noop")]
    redis_settings = RedisSettings.from_dsn(
        os.environ.get("BENCH_REDIS_URL", "redis://127.0.0.1:6379/9"))
    queue_name = os.environ.get("BENCH_ARQ_QUEUE", "bench:arq:queue")
    poll_delay = _SETTINGS.poll_delay_s
    max_jobs = _SETTINGS.max_jobs
    keep_result = 60
    health_check_interval = 60
