"""The stream worker: turns woken through the namespace's outbox, without arq.

arq cannot run on a Redis Cluster (its job, in-progress, retry and result keys come
from the job id alone, ``arq:abort`` is one global key, every queue operation is a
``WATCH``/``MULTI`` transaction, which the async cluster client refuses). The
namespace's outbox is already a durable queue with a consumer group, so on a
cluster every wake goes through it:

- **wake**: the relay reads at most as many entries as the worker has free turn
  slots (``HostSettings.max_jobs``) and starts each turn at once; the rest of the
  outbox stays for other workers' relays (backpressure, never an overflow queue).
  An entry whose wake is waiting for a slot stays in this consumer's pending list
  until the turn starts, so a killed worker's entries are claimed by another relay.
- **re-wake** (a lost lease, a stuck request) and **hand-back** (a drain): the
  ``publish_wake`` script appends a fresh outbox entry, once per request and lease
  period, and any worker's relay takes it.
- the same :class:`~sharedos_redis.worker.services.WorkerServices` (relay +
  reconciler) and :class:`~sharedos_redis.worker.turns.TurnRunner` as the arq worker,
  and the same drain: SIGTERM stops the relay, running turns finish within
  ``drain_grace_s``, the rest are handed back or interrupted, exit 0.

``sharedos-redis worker`` runs this mode on a ``redis+cluster://`` URL (or with
``--mode streams``); on a single server or Sentinel the arq worker stays the default.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import time

import anyio
from anyio.abc import TaskGroup, TaskStatus

from ..store.keys import Keys
from ..store.scripts import Scripts
from .host import MessagingHost
from .process import _Signals, install_signals
from .services import WorkerServices
from .slots import TurnSlot, TurnSlots
from .turns import DrainReport, TurnRunner

__all__ = ["StreamWorker", "serve_streams"]

log = logging.getLogger("sharedos_redis.worker")


class StreamWorker:
    """Relay, reconciler and up to ``max_jobs`` turns, woken through the outbox.

    Args:
        host: the messaging host.
        name: this worker's consumer name (default ``<hostname>-<pid>``).
        block_ms: the relay's read block; bounds how long stopping takes.
    """

    def __init__(self, host: MessagingHost, *, name: str | None = None,
                 block_ms: int = 250) -> None:
        self.host = host
        self.name = name or f"{socket.gethostname()}-{os.getpid()}"
        self.runner = TurnRunner(host, worker=self.name, on_hand_back=self.hand_back)
        self.slots = TurnSlots(host.settings.max_jobs, host.settings.max_in_flight)
        self.services = WorkerServices(host, wake=self.wake, rewake=self.rewake,
                                       consumer=self.name, block_ms=block_ms,
                                       capacity=self._free_slots)
        self._scripts = Scripts(host.redis)
        self._tg: TaskGroup | None = None
        self._waits: set[anyio.CancelScope] = set()
        self._stop = anyio.Event()
        self.services_died = False

    def _free_slots(self) -> int:
        # starved: also read what the waiting turns wait on, so a deadlock can be seen
        return self.slots.free + self.slots.starved_reads if self.runner.accepting else 0

    async def wake(self, namespace: str, message_id: str) -> None:
        """Start the turn once a slot is free; while draining, hand it to another worker."""
        scope = anyio.CancelScope()
        slot: TurnSlot | None = None
        self._waits.add(scope)
        try:
            with scope:
                if self.runner.accepting:
                    slot = await self.runner.take_slot(self.slots, namespace, message_id)
                    if slot is None:  # failed request_deadlocked
                        return
        finally:
            self._waits.discard(scope)
        if slot is None or not self.runner.accepting or self._tg is None:
            if slot is not None:
                slot.close()
            await self._publish(namespace, message_id, f"handback:{time.time_ns()}")
            return
        self._tg.start_soon(self.runner.run_in_slot, namespace, message_id, slot)

    async def rewake(self, namespace: str, message_id: str, reason: str) -> None:
        """Wake the turn again through the outbox (once per request, reason and lease period)."""
        bucket = int(time.time() // self.host.settings.lease_s)
        await self._publish(namespace, message_id, f"{reason}:{bucket}")

    async def hand_back(self, namespace: str, message_id: str) -> None:
        """A draining worker released this turn: publish it for another worker now."""
        await self._publish(namespace, message_id, f"handback:{time.time_ns()}")

    async def _publish(self, namespace: str, message_id: str, tag: str) -> None:
        keys = Keys(namespace)
        await self._scripts.call("publish_wake", [keys.rewake(message_id, tag), keys.outbox],
                                 [message_id, int(self.host.settings.lease_s * 1000)])

    async def run(self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        """Run relay + reconciler + turns until :meth:`drain` (or :meth:`stop`).

        The host must be entered (``async with host:``) by the caller, as for
        :class:`~sharedos_redis.worker.local.LocalWorker`: turns wait on its listener.
        """
        async with anyio.create_task_group() as tg:
            self._tg = tg
            await tg.start(self._services)
            task_status.started()
            await self._stop.wait()
            self.services.stop()
            with anyio.move_on_after(self.services.relay_block_s + 2):
                await self.services.relay.stopped.wait()
            tg.cancel_scope.cancel()
        self._tg = None

    async def _services(self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED
                        ) -> None:
        try:
            await self.services.run(task_status=task_status)
        except Exception:  # noted below; serve_streams() exits 1 for a supervisor
            log.exception("worker services stopped")
        finally:
            if not self._stop.is_set():  # relay/reconciler gone without being asked
                self.services_died = True
                self._stop.set()

    async def drain(self, grace_s: float) -> DrainReport:
        """Stop taking turns, let running ones finish within ``grace_s``, hand back the rest."""
        self.runner.accepting = False
        for scope in list(self._waits):
            scope.cancel()
        self.services.relay.stop()
        report = await self.runner.drain(grace_s)
        self._stop.set()
        return report

    def stop(self) -> None:
        """End :meth:`run` without draining (tests; turns left running re-run after their lease)."""
        self._stop.set()

    async def idle(self) -> bool:
        """No open request in the namespace and no turn running here (``--burst``)."""
        open_count = await self.host.redis.zcard(Keys(self.host.namespace).open)
        return not open_count and not self.runner.active


async def _main(worker: StreamWorker, burst: bool) -> None:
    await worker.host.redis.ping()  # unreachable Redis fails start-up here, in one line
    log.info("worker %s serving namespace %r (streams, max_jobs %d)", worker.name,
             worker.host.namespace, worker.host.settings.max_jobs)
    async with worker.host, anyio.create_task_group() as tg:
        await tg.start(worker.run)
        if burst:
            await _until_idle(worker)
            await worker.drain(0)


async def _until_idle(worker: StreamWorker) -> None:
    while True:  # polls: "nothing left anywhere" has no event to wait on
        if await worker.idle():
            return
        await anyio.sleep(0.1)


async def serve_streams(host: MessagingHost, *, burst: bool = False,
                        handle_signals: bool = True) -> int:
    """Run a stream worker for ``host`` until drained by a signal (or, with ``burst``, idle).

    Returns:
        The process exit code: 0 after a drain or a burst, 1 when stopped at once.

    Raises:
        StoreUnavailable: Redis is unreachable at start-up.
    """
    worker = StreamWorker(host)
    main = asyncio.ensure_future(_main(worker, burst))
    signals = _Signals(main)
    remove = install_signals(signals) if handle_signals else (lambda: None)
    drain = asyncio.ensure_future(signals.drain.wait())
    try:
        await asyncio.wait([main, drain], return_when=asyncio.FIRST_COMPLETED)
        if not main.done():
            report = await worker.drain(host.settings.drain_grace_s)
            log.info("drained on %s: %d turns finished in the grace, %d handed back, "
                     "%d interrupted; exit 0", signals.name, report.finished,
                     report.handed_back, report.interrupted)
        await main  # a start-up failure raises here
        if worker.services_died:  # relay/reconciler gone: exit so a supervisor restarts us
            log.error("worker services stopped unexpectedly; exit 1")
            return 1
        return 0
    except asyncio.CancelledError:
        if signals.count > 1:
            return 1
        raise
    finally:
        drain.cancel()
        remove()
        main.cancel()
        await asyncio.gather(main, return_exceptions=True)
