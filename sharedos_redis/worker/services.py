"""The background services every worker runs beside its turns: relay and reconciler."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import anyio
from anyio.abc import TaskStatus

from ..transport.relay import OutboxRelay
from .host import MessagingHost
from .reconciler import Reconciler

__all__ = ["WorkerServices"]


class WorkerServices:
    """Relay + reconciler of one host, run until :meth:`stop`.

    Args:
        host: the messaging host.
        wake: ``(namespace, message_id)`` → start (or enqueue) the turn; idempotent.
        rewake: ``(namespace, message_id, reason)`` → wake again after a lost job or lease.
        consumer: this relay's consumer name in the outbox group (unique per process).
        block_ms: the relay's XREADGROUP block; bounds how long stopping takes.
        capacity: how many turns ``wake`` can start now (the relay reads no more);
            None reads full batches (arq queues the overflow).
    """

    def __init__(self, host: MessagingHost, *, wake: Callable[[str, str], Awaitable[None]],
                 rewake: Callable[[str, str, str], Awaitable[None]], consumer: str,
                 block_ms: int = 250, capacity: Callable[[], int] | None = None) -> None:
        self.relay = OutboxRelay(
            host.redis, [host.namespace], wake, consumer=consumer, block_ms=block_ms,
            claim_idle_ms=int(host.settings.claim_idle_s * 1000),
            audit_maxlen=host.settings.audit_maxlen, capacity=capacity)
        self.reconciler = Reconciler(host, self.relay, rewake)
        self._stop = anyio.Event()

    async def run(self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        """Run both loops; returns after :meth:`stop` once the relay's read has ended.

        The relay is stopped by flag, never cancelled inside a blocked read (a
        cancelled XREADGROUP leaves a ghost reader on fakeredis, see FACTS.md).
        """
        async with anyio.create_task_group() as tg:
            await tg.start(self.relay.run)
            await tg.start(self.reconciler.run)
            task_status.started()
            await self._stop.wait()
            self.relay.stop()
            self.reconciler.stop()
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
        """Ask both loops to end."""
        self._stop.set()
