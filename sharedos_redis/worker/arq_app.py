"""arq integration: build ``WorkerSettings`` from a :class:`MessagingHost`.

Users start a worker with ``sharedos-redis worker --app mymodule:host`` (which adds
outage survival and a graceful drain, see :mod:`~sharedos_redis.worker.process`) or
with arq's CLI on ``WorkerSettings = worker_settings(host)``. Jobs are JSON, not
pickle; ``keep_result=0`` frees a job id as soon as the job ends.

Tenant isolation: each namespace has its own arq queue and health-check key
(``sos:{ns}:arq:queue``), and job ids carry the namespace's hash tag
(:meth:`Keys.job_id`), so a worker only ever takes its own namespace's jobs and a
Redis ACL user limited to the namespace's key patterns can run it. The arq pool is
built from the host's :class:`~sharedos_redis.store.client.RedisSettings`, so TLS,
credentials and Sentinel are exactly the host's.

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
from functools import partial
from typing import Any

import anyio
from anyio.abc import TaskGroup
from arq import ArqRedis
from arq.worker import Retry, func

from ..errors import ConfigurationError
from ..store.boundary import store_errors
from ..store.client import create_pool
from ..store.keys import Keys
from .host import MessagingHost
from .services import WorkerServices
from .slots import TurnSlots
from .stopping import stop_tasks
from .turns import TurnRunner

__all__ = ["APP_KEY", "WorkerApp", "run_turn", "worker_settings"]

log = logging.getLogger("sharedos_redis.worker")
APP_KEY = "sharedos_app"
"""The ``worker_settings`` entry (and arq ``ctx`` key) holding the :class:`WorkerApp`."""


async def run_turn(ctx: dict[str, Any], namespace: str, message_id: str) -> str:
    """The arq job: run (or skip, if already claimed or settled) one recipient turn."""
    app: WorkerApp = ctx[APP_KEY]
    if not app.runner.accepting:  # picked just as a drain began: let another worker run it
        raise Retry(defer=0.1)
    slot = await app.runner.take_slot(app.slots, namespace, message_id)  # shared with
    if slot is None:  # directly dispatched turns; None: failed request_deadlocked
        return "request_deadlocked"
    if not app.runner.accepting:  # a drain began while this job waited for a slot
        slot.close()
        raise Retry(defer=0.1)
    return await app.runner.run_in_slot(namespace, message_id, slot)


def _dumps(value: dict[str, Any]) -> bytes:
    return json.dumps(value, separators=(",", ":")).encode()


def _loads(raw: bytes) -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads(raw)
    return loaded


class WorkerApp:
    """One worker process's pieces: turn runner, slots, relay + reconciler, wake-ups.

    Args:
        host: the messaging host; it must carry its ``connection`` settings.

    Raises:
        ConfigurationError: the host has no connection settings (build it with
            :meth:`MessagingHost.from_url` or :meth:`MessagingHost.from_settings`).
    """

    def __init__(self, host: MessagingHost) -> None:
        if host.connection is None:
            raise ConfigurationError("a worker needs a host built with MessagingHost.from_url "
                                     "or MessagingHost.from_settings")
        self.host = host
        self.keys = Keys(host.namespace)
        self.name = f"{socket.gethostname()}-{os.getpid()}"
        self.runner = TurnRunner(host, worker=self.name, on_hand_back=self.hand_back)
        self.slots = TurnSlots(host.settings.max_jobs, host.settings.max_in_flight)
        self.pool = ArqRedis(create_pool(host.connection), job_serializer=_dumps,
                             job_deserializer=_loads, default_queue_name=self.keys.arq_queue)
        self.services: WorkerServices | None = None
        self._tg: TaskGroup | None = None
        self._task: asyncio.Task[None] | None = None
        self.services_stopped = asyncio.Event()

    async def _enqueue(self, namespace: str, message_id: str, suffix: str = "") -> None:
        keys = Keys(namespace)
        with store_errors("wake"):
            await self.pool.enqueue_job("run_turn", namespace, message_id,
                                        _job_id=keys.job_id(message_id, suffix),
                                        _queue_name=keys.arq_queue)

    def hand_over(self, namespace: str, message_id: str, entry_id: str) -> bool:
        """The relay's direct dispatch: start the turn now if a slot is free and let its
        claim retire outbox entry ``entry_id`` (one script instead of the relay's dispatch
        and the turn's claim); False leaves the entry to the relay's wake-up (enqueue)."""
        if not self.host.settings.direct_dispatch or self._tg is None \
                or not self.runner.accepting:
            return False
        slot = self.slots.try_take()
        if slot is None:
            return False
        self._tg.start_soon(partial(self.runner.run_in_slot, relayed=entry_id),
                            namespace, message_id, slot)
        return True

    async def wake(self, namespace: str, message_id: str) -> None:
        """Enqueue the turn of a newly accepted request (the relay calls this only when
        :meth:`hand_over` did not start it here)."""
        await self._enqueue(namespace, message_id)

    async def rewake(self, namespace: str, message_id: str, reason: str) -> None:
        """Enqueue the turn again after a lost job or lease."""
        # A time bucket per lease period: reconcilers racing in one period enqueue one
        # job; a duplicate across periods is harmless (the claim script says busy).
        bucket = int(time.time() // self.host.settings.lease_s)
        await self._enqueue(namespace, message_id, f":{reason}:{bucket}")

    async def hand_back(self, namespace: str, message_id: str) -> None:
        """A draining worker released this turn: enqueue it for another worker now."""
        await self._enqueue(namespace, message_id, f":handback:{time.time_ns()}")

    async def on_startup(self, ctx: dict[str, Any]) -> None:
        """arq start-up: enter the host and start relay + reconciler beside the turns."""
        ctx[APP_KEY] = self
        services = self.services = WorkerServices(
            self.host, wake=self.wake, rewake=self.rewake, consumer=self.name,
            hand_over=self.hand_over)
        started = asyncio.Event()

        async def background() -> None:
            try:
                async with self.host, anyio.create_task_group() as tg:
                    self._tg = tg
                    await tg.start(services.run)
                    started.set()
            except Exception:
                if started.is_set():  # after start-up: the process must not run on without
                    log.exception("worker services stopped")  # a relay; serve() exits 1
                raise
            finally:
                self.services_stopped.set()

        task = self._task = asyncio.create_task(background())
        ready = asyncio.create_task(started.wait())
        await asyncio.wait([task, ready], return_when=asyncio.FIRST_COMPLETED)
        if task.done():  # the services failed to start: surface why
            ready.cancel()
            task.result()

    async def on_shutdown(self, ctx: dict[str, Any]) -> None:
        """arq shut-down: stop relay + reconciler and leave the host."""
        if self.services is not None and self._task is not None:
            self.services.stop()
            done, _ = await asyncio.wait([self._task], timeout=self.services.relay_block_s + 5)
            if not done:  # a turn still running in the services' task group: stop it
                log.warning("worker services did not stop in time; cancelling what is left")
                if await stop_tasks({"worker services": self._task}, 5):
                    log.warning("worker services still running after cancelling; "
                                "leaving them")

    def settings(self) -> dict[str, Any]:
        """arq ``WorkerSettings`` as a dict (arq's ``run_worker`` and CLI accept it)."""
        s = self.host.settings
        return {
            "functions": [func(run_turn, name="run_turn", keep_result=0)],
            "redis_pool": self.pool,
            "queue_name": self.keys.arq_queue,
            "on_startup": self.on_startup,
            "on_shutdown": self.on_shutdown,
            "max_jobs": s.max_jobs,
            "job_timeout": s.job_timeout_s,
            "keep_result": 0,
            "poll_delay": s.poll_delay_s,
            "job_serializer": _dumps,
            "job_deserializer": _loads,
            "health_check_interval": 60,
            "job_completion_wait": int(s.turn_timeout_s),
            APP_KEY: self,
        }


def worker_settings(host: MessagingHost) -> dict[str, Any]:
    """arq ``WorkerSettings`` (as a dict arq's ``run_worker`` and CLI accept) for ``host``.

    Raises:
        ConfigurationError: the host has no connection settings (use
            :meth:`MessagingHost.from_url` or :meth:`MessagingHost.from_settings`).
    """
    return WorkerApp(host).settings()
