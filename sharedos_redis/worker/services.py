"""The background services every worker runs beside its turns: relay, reconciler and
the route lease on the agents it serves (the agent directory)."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable

import anyio
from anyio.abc import TaskStatus

from ..errors import SharedOSError
from ..store.boundary import Backoff
from ..transport.relay import HandOverHook, OutboxRelay
from .host import MessagingHost
from .reconciler import Reconciler

__all__ = ["RouteLease", "WorkerServices"]

log = logging.getLogger("sharedos_redis.worker")


class RouteLease:
    """Keeps this worker's route lease on the host's agents (``store.directory``) alive:
    registered at start, refreshed every third of ``route_lease_s`` until :meth:`stop`.

    A store outage never ends the loop (it backs off and retries); a refresh re-creates
    entries a restarted Redis lost. On stop nothing is deleted: another worker may serve
    the same agents, so the lease simply runs out.
    """

    def __init__(self, host: MessagingHost) -> None:
        self.host = host
        self.refreshed = 0
        self._stop = anyio.Event()

    async def refresh(self) -> int:
        """Register every agent of the host once; returns the expiry (ms).

        Raises:
            StoreUnavailable: Redis failed.
        """
        expiry = await self.host.directory.register(
            self.host.namespace, self.host.agents, self.host.settings.route_lease_s)
        self.refreshed += 1
        return expiry

    async def run(self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        """Register (one try before ``started``), then refresh until :meth:`stop`."""
        backoff = Backoff("route lease", log)
        period = self.host.settings.route_lease_s / 3
        started = False
        while not self._stop.is_set():
            try:
                await self.refresh()
            except SharedOSError as exc:  # every store error is mapped: wait and resume
                if not started:
                    task_status.started()
                    started = True
                await backoff.wait(exc, stop=self._stop)
                continue
            backoff.reset()
            if not started:
                task_status.started()
                started = True
            with anyio.move_on_after(period):
                await self._stop.wait()

    def stop(self) -> None:
        """End the loop (the lease is left to expire)."""
        self._stop.set()


class WorkerServices:
    """Relay + reconciler + route lease of one host, run until :meth:`stop`.

    Args:
        host: the messaging host.
        wake: ``(namespace, message_id)`` → start (or enqueue) the turn; idempotent.
        rewake: ``(namespace, message_id, reason)`` → wake again after a lost job or lease.
        consumer: this relay's consumer name in the outbox group (unique per process).
        block_ms: the relay's XREADGROUP block; bounds how long stopping takes.
        capacity: how many turns ``wake`` can start now (the relay reads no more);
            None reads full batches (arq queues the overflow).
        hand_over: direct dispatch that hands the outbox entry to the turn's claim
            (see :data:`~sharedos_redis.transport.relay.HandOverHook`).
    """

    def __init__(self, host: MessagingHost, *, wake: Callable[[str, str], Awaitable[None]],
                 rewake: Callable[[str, str, str], Awaitable[None]], consumer: str,
                 block_ms: int = 250, capacity: Callable[[], int] | None = None,
                 hand_over: HandOverHook | None = None) -> None:
        self.relay = OutboxRelay(
            host.redis, [host.namespace], wake, consumer=consumer, block_ms=block_ms,
            claim_idle_ms=int(host.settings.claim_idle_s * 1000),
            audit_maxlen=host.settings.audit_maxlen, capacity=capacity, hand_over=hand_over)
        self.reconciler = Reconciler(host, self.relay, rewake)
        self.route_lease = RouteLease(host)
        self._stop = anyio.Event()

    async def run(self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        """Run the loops; returns after :meth:`stop` once the relay's read has ended.

        The relay is stopped by flag, never cancelled inside a blocked read (a
        cancelled XREADGROUP leaves a ghost reader on fakeredis, see FACTS.md).
        """
        async with anyio.create_task_group() as tg:
            await tg.start(self.route_lease.run)  # served before the first wake-up
            await tg.start(self.relay.run)
            await tg.start(self.reconciler.run)
            task_status.started()
            await self._stop.wait()
            self.relay.stop()
            self.reconciler.stop()
            self.route_lease.stop()
            with anyio.move_on_after(self.relay_block_s + 1):
                await self._relay_idle()
            tg.cancel_scope.cancel()

    @property
    def relay_block_s(self) -> float:
        """Upper bound of one relay read."""
        return self.relay.block_ms / 1000

    async def _relay_idle(self) -> None:
        await self.relay.stopped.wait()

    def stop(self) -> None:
        """Ask the loops to end."""
        self._stop.set()
