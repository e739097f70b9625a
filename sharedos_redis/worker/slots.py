"""A worker's turn bounds: slots for *running* turns, and a larger bound on turns in flight.

A turn that waits for a nested ``messages.request`` runs nothing while it waits, so
it gives its running slot back for the wait (:class:`SlotReleasingRouter` wraps the
kernel's router) and takes one again when the reply is there. A delegation chain of
depth *d* therefore needs one free running slot at a time, not *d* (a resuming turn
never queues for its slot: with none free it runs on, briefly over the bound); the number of
turns started and not finished (running or waiting) is bounded separately by
``HostSettings.max_in_flight``, which caps memory.

Starvation by that bound fails fast: when every in-flight turn waits on a nested request
and each of those requests is itself queued *here* for an in-flight slot, no turn of this
worker can end and none of the queued ones can start: a deadlock. :meth:`TurnSlots.take`
then raises :class:`Deadlocked` for one of the waited-on requests (the smallest id), which
the worker fails ``request_deadlocked``: its parent gets a typed outcome at once, finishes
and frees its slot, and the rest proceed.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar

import anyio

from ..kernel.contracts import AccessContext, MessageDeliveryResult, MessageEnvelope
from ..kernel.ports import MessageRequestRouter

__all__ = ["Deadlocked", "Signal", "SlotReleasingRouter", "TurnSlot", "TurnSlots", "occupying"]


class Signal:
    """A broadcast wake-up whose event exists only while someone waits (firing it when
    nobody waits, as every turn does, creates nothing)."""

    def __init__(self) -> None:
        self._event: anyio.Event | None = None

    def fire(self) -> None:
        """Wake every current waiter."""
        event, self._event = self._event, None
        if event is not None:
            event.set()

    async def wait(self) -> None:
        """Wait for the next :meth:`fire`."""
        if self._event is None:
            self._event = anyio.Event()
        await self._event.wait()


class Deadlocked(Exception):
    """The request cannot get an in-flight slot: every in-flight turn waits on a request
    queued here for one (this one among them)."""


class TurnSlot:
    """The slots one turn holds: always its in-flight slot, its running slot unless waiting."""

    def __init__(self, slots: TurnSlots) -> None:
        self._slots = slots
        self.running = self.in_flight = False  # set as each is acquired
        self.waiting_on: str | None = None  # the nested request the turn waits for

    def release_running(self, waiting_on: str | None = None) -> None:
        """Give the running slot back (the turn is about to wait, for ``waiting_on``)."""
        if self.running:
            self._slots.running.release_on_behalf_of(self)
            self.running = False
        if waiting_on is not None and self.in_flight:
            self.waiting_on = waiting_on
        self._slots.changed()

    def reacquire_running(self) -> None:
        """Take a running slot again if one is free (the wait is over).

        A turn with its reply in hand never waits for a slot: queueing behind new turns
        could outlast its deadline and drop the reply. With none free it resumes
        without one, briefly over ``max_jobs``, and the next turns wait for it instead.
        """
        if self.waiting_on is not None:
            self.waiting_on = None
            self._slots.changed()
        if self.running or not self.in_flight:
            return
        try:
            self._slots.running.acquire_on_behalf_of_nowait(self)
        except anyio.WouldBlock:
            return
        self.running = True

    def close(self) -> None:
        """Give back everything still held (idempotent)."""
        self.waiting_on = None
        self.release_running()
        if self.in_flight:
            self._slots.in_flight.release_on_behalf_of(self)
            self._slots.holders.discard(self)
            self.in_flight = False
            self._slots.changed()


class TurnSlots:
    """``running`` bounds turns doing work; ``in_flight`` bounds turns started and not done.

    Args:
        running: running turns at once (``HostSettings.max_jobs``).
        in_flight: turns running or waiting on a nested request (``max_in_flight``).
    """

    def __init__(self, running: int, in_flight: int) -> None:
        self.running = anyio.CapacityLimiter(running)
        self.in_flight = anyio.CapacityLimiter(max(in_flight, running))
        self.holders: set[TurnSlot] = set()  # the slots holding an in-flight slot
        self._queued: Counter[str] = Counter()  # requests waiting in take()
        self._changed = Signal()  # what a waiting take() waits for

    def changed(self) -> None:
        """Wake the waiters of :meth:`take` to look for a deadlock again (an event
        exists only while one waits: a turn's slot changes create none)."""
        self._changed.fire()

    def deadlocked(self) -> str | None:
        """The request to fail when every in-flight turn waits on a request queued here
        for a slot (None: no deadlock)."""
        if self.in_flight.available_tokens > 0 or not self.holders:
            return None
        waits = [slot.waiting_on for slot in self.holders]
        if any(w is None or w not in self._queued for w in waits):
            return None
        return min(w for w in waits if w is not None)

    def _hold(self, slot: TurnSlot) -> None:
        slot.in_flight = True
        self.holders.add(slot)

    @property
    def free(self) -> int:
        """How many turns could start now."""
        return int(min(self.running.available_tokens, self.in_flight.available_tokens))

    @property
    def starved_reads(self) -> int:
        """With every in-flight slot held by a waiting turn: how many of the requests they
        wait on are not queued here yet (a reader may fetch that many more, so a deadlock
        among them can be seen); else 0."""
        if self.in_flight.available_tokens > 0 or not self.holders:
            return 0
        waits = [slot.waiting_on for slot in self.holders]
        if any(w is None for w in waits):
            return 0
        return sum(1 for w in waits if w not in self._queued)

    def try_take(self) -> TurnSlot | None:
        """Both slots at once, or None when either bound is reached."""
        slot = TurnSlot(self)
        try:
            self.in_flight.acquire_on_behalf_of_nowait(slot)
            self._hold(slot)
            self.running.acquire_on_behalf_of_nowait(slot)
            slot.running = True
        except anyio.WouldBlock:
            slot.close()
            return None
        return slot

    async def take(self, message_id: str = "") -> TurnSlot:
        """Wait for both slots (in flight first, then running) for request ``message_id``.

        Raises:
            Deadlocked: every in-flight turn waits on a request queued here, and this
                one is the request chosen to fail (see the module doc).
        """
        slot = TurnSlot(self)
        deadlocked = False
        self._queued[message_id] += 1
        self.changed()
        try:
            async with anyio.create_task_group() as tg:
                async def watch() -> None:
                    nonlocal deadlocked
                    while self.deadlocked() != message_id or not message_id:
                        await self._changed.wait()
                    deadlocked = True
                    tg.cancel_scope.cancel()

                tg.start_soon(watch)
                await self.in_flight.acquire_on_behalf_of(slot)
                self._hold(slot)
                tg.cancel_scope.cancel()
            if deadlocked and not slot.in_flight:
                raise Deadlocked(message_id)
            await self.running.acquire_on_behalf_of(slot)
            slot.running = True
        except BaseException:
            slot.close()
            raise
        finally:
            self._queued[message_id] -= 1
            if self._queued[message_id] <= 0:
                del self._queued[message_id]
            self.changed()
        return slot


_current: ContextVar[TurnSlot | None] = ContextVar("sharedos_turn_slot", default=None)


@contextmanager
def occupying(slot: TurnSlot) -> Iterator[TurnSlot]:
    """Run a turn in ``slot``: its nested waits give the running slot back meanwhile."""
    token = _current.set(slot)
    try:
        yield slot
    finally:
        _current.reset(token)


class SlotReleasingRouter:
    """The kernel's router, giving the waiting turn's running slot back while it waits."""

    def __init__(self, inner: MessageRequestRouter) -> None:
        self._inner = inner

    async def resolve_reply(self, context: AccessContext, request: MessageEnvelope,
                            receipt: MessageDeliveryResult) -> MessageEnvelope:
        """Wait for the reply through the wrapped router, without holding a running slot."""
        slot = _current.get()
        if slot is None or not slot.running:
            return await self._inner.resolve_reply(context, request, receipt)
        slot.release_running(waiting_on=request.id)
        try:
            return await self._inner.resolve_reply(context, request, receipt)
        finally:
            slot.reacquire_running()
