"""``LocalWorker``: the whole worker in this event loop, without arq.

Same relay, reconciler and ``TurnRunner`` as the arq worker; only the wake-up
differs (a task here, an arq job there). For tests, the example on embedded
fakeredis, and single-process hosts. Use::

    async with host, LocalWorker(host):
        result = await host.start_turn("bob", {...}, purpose="atlas-status")
"""

from __future__ import annotations

import logging
import math
import uuid
from types import TracebackType
from typing import Self

import anyio
from anyio.abc import TaskGroup
from anyio.streams.memory import MemoryObjectReceiveStream

from .host import MessagingHost
from .services import WorkerServices
from .slots import TurnSlots
from .turns import TurnRunner

__all__ = ["LocalWorker"]

log = logging.getLogger("sharedos_redis.worker")


class LocalWorker:
    """Relay, reconciler and up to ``settings.max_jobs`` concurrent turns, in-process."""

    def __init__(self, host: MessagingHost, *, consumer: str | None = None,
                 block_ms: int = 100) -> None:
        self.host = host
        self.worker = consumer or f"local-{uuid.uuid4().hex[:8]}"
        self.runner = TurnRunner(host, worker=self.worker)
        self._send, self._receive = anyio.create_memory_object_stream[tuple[str, str]](math.inf)
        self.services = WorkerServices(host, wake=self._wake, rewake=self._rewake,
                                       consumer=self.worker, block_ms=block_ms)
        self._slots = TurnSlots(host.settings.max_jobs, host.settings.max_in_flight)
        self._tg: TaskGroup | None = None
        self.outcomes: list[str] = []

    async def _wake(self, namespace: str, message_id: str) -> None:
        self._send.send_nowait((namespace, message_id))

    async def _rewake(self, namespace: str, message_id: str, reason: str) -> None:
        self._send.send_nowait((namespace, message_id))

    async def _dispatch(self, receive: MemoryObjectReceiveStream[tuple[str, str]],
                        tg: TaskGroup) -> None:
        async with receive:
            async for namespace, message_id in receive:
                tg.start_soon(self._turn, namespace, message_id)

    async def _turn(self, namespace: str, message_id: str) -> None:
        slot = await self.runner.take_slot(self._slots, namespace, message_id)
        if slot is None:
            self.outcomes.append("request_deadlocked")
            return
        self.outcomes.append(await self.runner.run_in_slot(namespace, message_id, slot))

    async def __aenter__(self) -> Self:
        self._tg = anyio.create_task_group()
        await self._tg.__aenter__()
        self._tg.start_soon(self._dispatch, self._receive, self._tg)
        await self._tg.start(self.services.run)
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None,
                        exc: BaseException | None, tb: TracebackType | None) -> None:
        assert self._tg is not None
        self.services.stop()
        with anyio.move_on_after(self.services.relay_block_s + 2, shield=True):
            await self.services.relay.stopped.wait()
        self._tg.cancel_scope.cancel()
        await self._tg.__aexit__(exc_type, exc, tb)
        self._tg = None
