"""arq integration: build ``WorkerSettings`` from a :class:`MessagingHost`.

Users start a worker with ``sharedos-redis worker --app mymodule:host`` or with
arq's CLI on ``WorkerSettings = worker_settings(host)``. Jobs are JSON, not
pickle; a turn's arq job id is derived from the message id so two relays
enqueue it once; ``keep_result=0`` frees the id as soon as the job ends.

Direct dispatch (``HostSettings.direct_dispatch``, on by default): the relay runs
in the worker, so when the worker has a free turn slot it starts the woken turn
right there instead of enqueueing it and waiting for arq's next poll; with no free
slot, and for every re-wake after a crash, it enqueues the arq job. Both paths run
the same ``TurnRunner`` and claim the same lease, so a turn still runs once (or
again only after a crash) and all turns of a worker share its ``max_jobs`` slots.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import socket
import time
from typing import Any

import anyio
from anyio.abc import TaskGroup
from arq import ArqRedis
from arq.connections import RedisSettings as ArqRedisSettings
from arq.worker import func

from ..errors import ConfigurationError
from ..store.keys import encode_id
from .host import MessagingHost
from .services import WorkerServices
from .turns import TurnRunner

__all__ = ["job_id", "run_turn", "worker_settings"]

log = logging.getLogger("sharedos_redis.worker")
_RUNNER = "sharedos_runner"
_SLOTS = "sharedos_turn_slots"
_SERVICES = "sharedos_services"
_TASK = "sharedos_services_task"


def job_id(namespace: str, message_id: str, suffix: str = "") -> str:
    """The arq job id of a request's turn (``suffix`` distinguishes re-runs)."""
    return f"sos:{encode_id(namespace)}:{encode_id(message_id)}{suffix}"


async def run_turn(ctx: dict[str, Any], namespace: str, message_id: str) -> str:
    """The arq job: run (or skip, if already claimed or settled) one recipient turn."""
    runner: TurnRunner = ctx[_RUNNER]
    async with ctx[_SLOTS]:  # shared with directly dispatched turns
        return await runner.run_safely(namespace, message_id)


class _DirectTurns:
    """Starts a woken turn in this worker when one of its turn slots is free."""

    def __init__(self, runner: TurnRunner, slots: anyio.CapacityLimiter) -> None:
        self.runner, self.slots = runner, slots
        self.tg: TaskGroup | None = None

    def try_start(self, namespace: str, message_id: str) -> bool:
        """Start the turn now if a slot is free; False means: enqueue it instead."""
        if self.tg is None:
            return False
        token = object()
        try:
            self.slots.acquire_on_behalf_of_nowait(token)
        except anyio.WouldBlock:
            return False
        self.tg.start_soon(self._run, namespace, message_id, token)
        return True

    async def _run(self, namespace: str, message_id: str, token: object) -> None:
        try:
            await self.runner.run_safely(namespace, message_id)
        except Exception:  # one broken turn must not stop the worker; its lease expires
            log.exception("turn %s/%s crashed", namespace, message_id)
        finally:
            self.slots.release_on_behalf_of(token)


def _dumps(value: dict[str, Any]) -> bytes:
    return json.dumps(value, separators=(",", ":")).encode()


def _loads(raw: bytes) -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads(raw)
    return loaded


def worker_settings(host: MessagingHost) -> dict[str, Any]:
    """arq ``WorkerSettings`` (as a dict arq's ``run_worker`` and CLI accept) for ``host``.

    Raises:
        ConfigurationError: the host was not built with a ``redis_url`` (use
            :meth:`MessagingHost.from_url`); a worker in another process needs one.
    """
    if not host.redis_url:
        raise ConfigurationError("worker needs a host built with MessagingHost.from_url(url, ...)")
    s = host.settings
    worker_name = f"{socket.gethostname()}-{os.getpid()}"

    async def on_startup(ctx: dict[str, Any]) -> None:
        pool: ArqRedis = ctx["redis"]
        runner = ctx[_RUNNER] = TurnRunner(host, worker=worker_name)
        slots = ctx[_SLOTS] = anyio.CapacityLimiter(s.max_jobs)

        direct = _DirectTurns(runner, slots)

        async def wake(namespace: str, message_id: str) -> None:
            if s.direct_dispatch and direct.try_start(namespace, message_id):
                return
            await pool.enqueue_job("run_turn", namespace, message_id,
                                   _job_id=job_id(namespace, message_id))

        async def rewake(namespace: str, message_id: str, reason: str) -> None:
            # A time bucket per lease period: reconcilers racing in one period enqueue one
            # job; a duplicate across periods is harmless (the claim script says busy).
            bucket = int(time.time() // s.lease_s)
            await pool.enqueue_job("run_turn", namespace, message_id,
                                   _job_id=job_id(namespace, message_id, f":{reason}:{bucket}"))

        services = WorkerServices(host, wake=wake, rewake=rewake, consumer=worker_name)
        ctx[_SERVICES] = services
        started = asyncio.Event()

        async def background() -> None:
            async with host, anyio.create_task_group() as tg:
                direct.tg = tg
                await tg.start(services.run)
                started.set()

        task = ctx[_TASK] = asyncio.create_task(background())
        ready = asyncio.create_task(started.wait())
        await asyncio.wait([task, ready], return_when=asyncio.FIRST_COMPLETED)
        if task.done():  # the services failed to start: surface why
            ready.cancel()
            task.result()

    async def on_shutdown(ctx: dict[str, Any]) -> None:
        services: WorkerServices | None = ctx.get(_SERVICES)
        task: asyncio.Task[None] | None = ctx.get(_TASK)
        if services is not None and task is not None:
            services.stop()
            await asyncio.wait_for(task, timeout=services.relay_block_s + 5)

    return {
        "functions": [func(run_turn, name="run_turn", keep_result=0)],
        "redis_settings": ArqRedisSettings.from_dsn(host.redis_url),
        "on_startup": on_startup,
        "on_shutdown": on_shutdown,
        "max_jobs": s.max_jobs,
        "job_timeout": s.job_timeout_s,
        "keep_result": 0,
        "poll_delay": s.poll_delay_s,
        "job_serializer": _dumps,
        "job_deserializer": _loads,
        "health_check_interval": 60,
        "job_completion_wait": int(s.turn_timeout_s),
    }
