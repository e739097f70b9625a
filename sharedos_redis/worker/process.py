"""The worker process behind ``sharedos-redis worker``: arq, supervised (or, on a
Redis Cluster, the stream worker of :mod:`~sharedos_redis.worker.streams`).

arq's own loop exits the process when Redis blips (arq issue #498) and cancels
running jobs a few seconds after SIGTERM. :func:`serve` runs arq's ``Worker`` with
three changes:

- **Outages**: a poll that fails with a store error is logged and retried with
  back-off (:class:`ResilientWorker`); relay, reconciler, listener, audit writer and
  lease renewal ride out the same outage on their own, so the process resumes by
  itself when Redis (or a new Sentinel primary) answers again.
- **Drain**: on SIGTERM/SIGINT the worker stops taking turns (arq stops picking,
  direct dispatch stops), lets running turns finish within
  ``HostSettings.drain_grace_s``, then hands the rest back at once — a turn whose
  every non-repeatable call came back denied or never entered its port is released
  for another worker to re-run now; any other ends ``recipient_turn_interrupted`` —
  and exits 0 with one log line. A second signal stops at once (exit 1; the leases
  of unfinished turns expire and they re-run as after a crash). After the drain the
  process exits within a bound (:data:`CLOSE_S` for arq's loop and jobs, then the
  services' own bound): what does not stop by then is named in a WARNING and left.
- **Health**: the health-check line also counts turns (direct and queued) by outcome.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
from collections.abc import Callable
from time import time
from typing import Any

from arq.utils import poll
from arq.worker import Worker

from ..errors import ConfigurationError
from ..store.boundary import STORE_ERRORS, Backoff
from .arq_app import APP_KEY, WorkerApp
from .host import MessagingHost
from .stopping import stop_tasks

__all__ = ["CLOSE_S", "WORKER_MODES", "ResilientWorker", "install_signals", "serve"]

WORKER_MODES = ("auto", "arq", "streams")
"""``auto``: the stream worker on a Redis Cluster, arq on a single server or Sentinel."""

log = logging.getLogger("sharedos_redis.worker")
CLOSE_S = 5.0
"""After the drain: how long arq's poll loop and job tasks may take to stop."""


class ResilientWorker(Worker):
    """arq's ``Worker`` whose poll loop outlives Redis outages and reports turns."""

    def __init__(self, *args: Any, app: WorkerApp, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.app = app
        self._backoff = Backoff("worker poll", log)
        self._stopping = False

    def stop(self) -> None:
        """End :meth:`main` before its next poll. A cancellation alone may not: one that
        lands as redis-py finishes a socket write is lost on Python 3.11 (see
        :mod:`~sharedos_redis.worker.stopping`) and the loop would poll on forever."""
        self._stopping = True

    async def main(self) -> None:
        """arq's ``main`` without its start-up INFO call (an ACL user limited to its
        namespace need not be granted INFO): start-up, then poll until stopped."""
        await self.pool.ping()  # unreachable Redis fails start-up here, in one line
        self.ctx["redis"] = self.pool
        await self.app.on_startup(self.ctx)
        # only now: the route lease is held and the relay runs (a request accepted after
        # this line is served; the benchmark waits for it before its first request)
        log.info("worker %s serving namespace %r (queue %s, max_jobs %d, max_in_flight %d)",
                 self.app.name, self.app.host.namespace, self.queue_name,
                 self.app.host.settings.max_jobs, self.max_jobs)
        async for _ in poll(self.poll_delay_s):
            if self._stopping:
                return
            await self._poll_iteration()
            if self.burst and await self._burst_done():
                return

    async def _burst_done(self) -> bool:
        try:
            queued = await self.pool.zcard(self.queue_name)
        except STORE_ERRORS:
            return False
        if queued or self.app.runner.active:
            return False
        await asyncio.gather(*self.tasks.values())
        return True

    async def _poll_iteration(self) -> None:
        # arq may hold up to max_in_flight jobs (waiting parents included) but picks only
        # as many new ones as there are free running slots, so idle workers get the rest
        free = self.app.slots.free
        self.allow_pick_jobs = self.app.runner.accepting and free > 0
        self.queue_read_limit = max(1, free)
        try:
            await super()._poll_iteration()
        except STORE_ERRORS as exc:
            await self._backoff.wait(exc)
        else:
            self._backoff.reset()

    async def start_jobs(self, job_ids: list[bytes]) -> None:
        """arq's ``start_jobs``, giving back the job slot a store error took before its
        task was created (arq keeps it, and after ``max_jobs`` such errors it would
        never pick a job again)."""
        for job_id in job_ids:
            counted = self.job_counter
            try:
                await super().start_jobs([job_id])
            except STORE_ERRORS:
                if self.job_counter > counted and job_id.decode() not in self.tasks:
                    self.job_counter -= 1
                    self.sem.release()
                raise

    async def record_health(self) -> None:
        """arq's health line, with this worker's turns (direct and queued) by outcome."""
        now_ts = time()
        if now_ts - self._last_health_check < self.health_check_interval:
            return
        self._last_health_check = now_ts
        outcomes = self.app.runner.outcomes
        info = (f"j_complete={self.jobs_complete} j_failed={self.jobs_failed} "
                f"j_retried={self.jobs_retried} turns={sum(outcomes.values())} "
                f"replied={outcomes['replied']} turns_running={len(self.app.runner.active)} "
                f"queued={await self.pool.zcard(self.queue_name)}")
        await self.pool.psetex(self.health_check_key,
                               int((self.health_check_interval + 1) * 1000), info.encode())
        if info != self._last_health_check_log:
            log.info("health: %s", info)
            self._last_health_check_log = info


class _Signals:
    """First signal: drain. Second: stop now."""

    def __init__(self, main: asyncio.Task[Any]) -> None:
        self.main = main
        self.serve = asyncio.current_task()  # the task a second signal stops, mid-drain too
        self.drain = asyncio.Event()
        self.count = 0
        self.name = ""

    def __call__(self, signum: int) -> None:
        self.count += 1
        self.name = signal.Signals(signum).name
        if self.count == 1:
            log.info("%s: draining (no new turns; running turns may finish)", self.name)
            self.drain.set()
        else:
            log.warning("%s again: stopping now", self.name)
            self.main.cancel()
            if self.serve is not None:
                self.serve.cancel()


def install_signals(signals: _Signals) -> Callable[[], None]:
    """Route SIGTERM/SIGINT to ``signals``; returns the function that removes them."""
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, signals, signum)

    def remove() -> None:
        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.remove_signal_handler(signum)

    return remove


async def serve(host: MessagingHost, *, burst: bool = False, handle_signals: bool = True,
                mode: str = "auto") -> int:
    """Run a worker for ``host`` until drained by a signal (or, with ``burst``, idle).

    ``mode`` (:data:`WORKER_MODES`): ``auto`` runs the stream worker
    (:mod:`~sharedos_redis.worker.streams`) when the host's connection is a Redis
    Cluster and the arq worker otherwise; ``arq`` or ``streams`` forces one.

    Returns:
        The process exit code: 0 after a drain or a burst, 1 when stopped at once.

    Raises:
        ConfigurationError: the host cannot run a worker (or arq on a cluster).
        StoreUnavailable: Redis is unreachable at start-up.
    """
    if mode not in WORKER_MODES:
        raise ConfigurationError(f"unknown worker mode {mode!r}; use one of {WORKER_MODES}")
    cluster = host.connection is not None and host.connection.cluster
    if mode == "streams" or (mode == "auto" and cluster):
        from .streams import serve_streams

        return await serve_streams(host, burst=burst, handle_signals=handle_signals)
    if cluster:
        raise ConfigurationError("arq cannot run on a Redis Cluster: use --mode streams")
    app = WorkerApp(host)
    settings = {k: v for k, v in app.settings().items() if k != APP_KEY}
    settings["max_jobs"] = host.settings.max_in_flight  # running turns: app.slots
    worker = ResilientWorker(**settings, app=app, burst=burst, handle_signals=False)
    main = asyncio.ensure_future(worker.main())
    signals = _Signals(main)
    remove = install_signals(signals) if handle_signals else (lambda: None)
    drain = asyncio.ensure_future(signals.drain.wait())
    died = asyncio.ensure_future(app.services_stopped.wait())
    try:
        await asyncio.wait([main, drain, died], return_when=asyncio.FIRST_COMPLETED)
        if main.done():
            main.result()  # a start-up failure raises here
            return 0
        if died.done():  # relay/reconciler/host gone: exit so a supervisor restarts us
            log.error("worker services stopped unexpectedly; exit 1")
            return 1
        return await _drain(worker, app, main, signals)
    except asyncio.CancelledError:
        if signals.count > 1:
            return 1
        raise
    finally:
        drain.cancel()
        died.cancel()
        remove()
        await _close(worker, app, main)


async def _drain(worker: ResilientWorker, app: WorkerApp, main: asyncio.Task[Any],
                 signals: _Signals) -> int:
    worker.allow_pick_jobs = False
    report = await app.runner.drain(app.host.settings.drain_grace_s)
    log.info("drained on %s: %d turns finished in the grace, %d handed back, "
             "%d interrupted; exit 0", signals.name, report.finished, report.handed_back,
             report.interrupted)
    return 0


async def _close(worker: ResilientWorker, app: WorkerApp, main: asyncio.Task[Any]) -> None:
    """Stop arq's loop and any job task left (within :data:`CLOSE_S`), then the
    services, the host and the pool."""
    worker.stop()
    tasks = {"arq poll loop": main,
             **{f"arq job {job_id}": task for job_id, task in worker.tasks.items()}}
    left = await stop_tasks(tasks, CLOSE_S)
    if left:
        log.warning("shutdown: %s still running %.0f s after the drain; exiting without "
                    "waiting for them", ", ".join(left), CLOSE_S)
    with contextlib.suppress(*STORE_ERRORS):
        await asyncio.wait_for(app.pool.delete(worker.health_check_key), 2)
    try:
        await app.on_shutdown(worker.ctx)
    finally:
        await app.pool.aclose(close_connection_pool=True)
