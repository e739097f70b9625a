"""A worker's turn bounds: slots for *running* turns, and a larger bound on turns in flight.

A turn that waits for a nested ``messages.request`` runs nothing while it waits, so
it gives its running slot back for the wait (:class:`SlotReleasingRouter` wraps the
kernel's router) and takes one again when the reply is there. A delegation chain of
depth *d* therefore needs one free running slot at a time, not *d* (a resuming turn
never queues for its slot: with none free it runs on, briefly over the bound); the number of
turns started and not finished (running or waiting) is bounded separately by
``HostSettings.max_in_flight``, which caps memory.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar

import anyio

from ..kernel.contracts import AccessContext, MessageDeliveryResult, MessageEnvelope
from ..kernel.ports import MessageRequestRouter

__all__ = ["SlotReleasingRouter", "TurnSlot", "TurnSlots", "occupying"]


class TurnSlot:
    """The slots one turn holds: always its in-flight slot, its running slot unless waiting."""

    def __init__(self, slots: TurnSlots) -> None:
        self._slots = slots
        self.running = self.in_flight = False  # set as each is acquired

    def release_running(self) -> None:
        """Give the running slot back (the turn is about to wait)."""
        if self.running:
            self._slots.running.release_on_behalf_of(self)
            self.running = False

    def reacquire_running(self) -> None:
        """Take a running slot again if one is free (the wait is over).

        A turn with its reply in hand never waits for a slot: queueing behind new turns
        could outlast its deadline and drop the reply. With none free it resumes
        without one, briefly over ``max_jobs``, and the next turns wait for it instead.
        """
        if self.running or not self.in_flight:
            return
        try:
            self._slots.running.acquire_on_behalf_of_nowait(self)
        except anyio.WouldBlock:
            return
        self.running = True

    def close(self) -> None:
        """Give back everything still held (idempotent)."""
        self.release_running()
        if self.in_flight:
            self._slots.in_flight.release_on_behalf_of(self)
            self.in_flight = False


class TurnSlots:
    """``running`` bounds turns doing work; ``in_flight`` bounds turns started and not done.

    Args:
        running: running turns at once (``HostSettings.max_jobs``).
        in_flight: turns running or waiting on a nested request (``max_in_flight``).
    """

    def __init__(self, running: int, in_flight: int) -> None:
        self.running = anyio.CapacityLimiter(running)
        self.in_flight = anyio.CapacityLimiter(max(in_flight, running))

    @property
    def free(self) -> int:
        """How many turns could start now."""
        return int(min(self.running.available_tokens, self.in_flight.available_tokens))

    def try_take(self) -> TurnSlot | None:
        """Both slots at once, or None when either bound is reached."""
        slot = TurnSlot(self)
        try:
            self.in_flight.acquire_on_behalf_of_nowait(slot)
            slot.in_flight = True
            self.running.acquire_on_behalf_of_nowait(slot)
            slot.running = True
        except anyio.WouldBlock:
            slot.close()
            return None
        return slot

    async def take(self) -> TurnSlot:
        """Wait for both slots (in flight first, then running)."""
        slot = TurnSlot(self)
        try:
            await self.in_flight.acquire_on_behalf_of(slot)
            slot.in_flight = True
            await self.running.acquire_on_behalf_of(slot)
            slot.running = True
        except BaseException:
            slot.close()
            raise
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
        slot.release_running()
        try:
            return await self._inner.resolve_reply(context, request, receipt)
        finally:
            slot.reacquire_running()
