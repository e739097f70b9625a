"""RedisRequestRouter: the kernel's ``MessageRequestRouter`` on Redis.

Owns waiting for a reply (one :class:`~.listener.SettledListener` per router, so a
thousand waiters share one reading connection plus ``max_concurrent_checks``
connections for their durable checks), deadlines, caller cancellation, and the
host-facing settlement, cancellation and inspection calls. Settlement itself is
:class:`~sharedos_redis.store.markers.MarkerStore`'s (one Lua script each).
Imports no arq.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import AsyncIterator
from types import TracebackType
from typing import Any, Self

import anyio
from anyio.abc import TaskGroup
from pydantic import BaseModel, ConfigDict, Field
from redis.asyncio import Redis

from ..errors import (
    ConfigurationError,
    ContractError,
    RequestCancelled,
    RequestExpired,
    RequestFailed,
    RequestTimedOut,
    SharedOSError,
    StoreUnavailable,
    UnknownMessage,
)
from ..faults import fault_point
from ..kernel.contracts import AccessContext, AuditEvent, MessageDeliveryResult, MessageEnvelope
from ..store.keys import TERMINAL_STATES
from ..store.markers import FailureState, MarkerStore, Settlement
from .inspection import PendingRequest, SettledRequest, list_pending, list_recent, read_timeline
from .listener import Settled, SettledListener, WaitSlot, guarded
from .tree import DelegationTree, read_tree

__all__ = ["RedisRequestRouter", "RouterSettings"]


class RouterSettings(BaseModel):
    """How the router waits.

    Attributes:
        listener_block_ms: the listener's ``XREAD BLOCK``; bounds the extra latency of
            the first request of a namespace new to this process.
        max_concurrent_checks: Redis calls of waiters in flight at once (connections).
        grace_ms: how long past the deadline a waiter still waits for a settlement.
        operation_timeout_ms: bound of each waiter-side Redis call.
        namespace_linger_s: how long a namespace without waiters is still read.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    listener_block_ms: int = Field(1000, gt=0)
    max_concurrent_checks: int = Field(16, gt=0)
    grace_ms: int = Field(250, ge=0)
    operation_timeout_ms: int = Field(5000, gt=0)
    namespace_linger_s: float = Field(60.0, ge=0)


def _outcome(message_id: str, outcome: Settled) -> MessageEnvelope:
    """The stored reply of a replied request; the typed error of any other ending."""
    if outcome.state == "replied":
        try:
            return MessageEnvelope.from_json(outcome.result)
        except ContractError:
            raise RequestFailed(message_id, "invalid_message_reply") from None
    if outcome.state == "timed_out":
        raise RequestTimedOut(message_id)
    if outcome.state == "cancelled":
        raise RequestCancelled(message_id)
    if outcome.state == "dead":
        raise RequestFailed(message_id, "request_dead_lettered")
    raise RequestFailed(message_id, outcome.result or "recipient_turn_failed")


def _fence(metadata: dict[str, Any]) -> tuple[str, str] | None:
    """(parent request, attempt) of a nested request's receipt, else None."""
    parent, attempt = metadata.get("parent"), metadata.get("attempt")
    if isinstance(parent, str) and isinstance(attempt, int) and not isinstance(attempt, bool):
        return parent, str(attempt)
    return None


class RedisRequestRouter:
    """Resolves replies of requests accepted by the Redis transport.

    Use as ``async with RedisRequestRouter(redis) as router:`` (enter and exit in
    the same task): entering starts the listener task in the router's own task
    group; leaving stops it at once (a blocked read is cancelled: its connection is
    dropped).
    """

    def __init__(self, redis: Redis, *, settings: RouterSettings | None = None,
                 markers: MarkerStore | None = None) -> None:
        self._redis = redis
        self.settings = settings or RouterSettings()
        self.markers = markers or MarkerStore(redis)
        self._limiter = anyio.CapacityLimiter(self.settings.max_concurrent_checks)
        self._timeout_s = self.settings.operation_timeout_ms / 1000
        self._listener: SettledListener | None = None
        self._tg: TaskGroup | None = None

    async def __aenter__(self) -> Self:
        if self._tg is not None:
            raise ConfigurationError("the router is already running")
        s = self.settings
        listener = SettledListener(self._redis, limiter=self._limiter,
                                   block_ms=s.listener_block_ms, timeout_s=self._timeout_s,
                                   linger_s=s.namespace_linger_s)
        tg = anyio.create_task_group()
        await tg.__aenter__()
        try:
            await tg.start(listener.run)
        except BaseException as exc:
            await tg.__aexit__(type(exc), exc, exc.__traceback__)
            raise
        self._tg, self._listener = tg, listener
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None,
                        exc: BaseException | None, tb: TracebackType | None) -> None:
        await self.aclose()

    @property
    def running(self) -> bool:
        """Whether the listener runs (``resolve_reply`` needs it)."""
        return self._listener is not None

    async def aclose(self) -> None:
        """Stop the listener and wait for it (idempotent)."""
        tg, listener = self._tg, self._listener
        self._tg = self._listener = None
        if tg is None or listener is None:
            return
        listener.stop()
        tg.cancel_scope.cancel()  # don't sit out a blocked XREAD (up to listener_block_ms)
        await tg.__aexit__(None, None, None)

    async def resolve_reply(self, context: AccessContext, request: MessageEnvelope,
                            receipt: MessageDeliveryResult) -> MessageEnvelope:
        """Wait for the settlement of ``request`` (namespace = ``context.namespace_id``).

        A waiter armed before the accept (:meth:`expect`) waits at once; one whose
        receipt says ``replayed`` (a re-attached nested request, possibly settled
        already) or that was not armed reads the marker once first and returns a
        terminal outcome at once.

        Returns:
            The stored reply envelope (the kernel re-validates it).

        Raises:
            RequestFailed: settled as failed (``code``) or dead (``request_dead_lettered``).
            RequestTimedOut: the deadline passed; the marker is now ``timed_out``.
            RequestCancelled: the request was cancelled by the host.
            RequestExpired: its record expired or was evicted while it was open.
            UnknownMessage: no such request in the namespace.
            StoreUnavailable: Redis failed.
            ConfigurationError: the router is not running.
        """
        listener = self._listener
        if listener is None or self._tg is None:
            raise ConfigurationError("enter the router (async with) before resolving replies")
        ns, mid = context.namespace_id, request.id
        metadata = receipt.metadata or {}
        hint = metadata.get("deadlineMs")
        deadline_hint = hint if isinstance(hint, int) and not isinstance(hint, bool) else None
        # a re-attached request (issue 12) may have settled before its waiter was armed
        replayed = metadata.get("replayed") is True
        fence = _fence(metadata)
        try:
            async with listener.watch_request(ns, mid) as (slot, armed):
                return await self._await_outcome(ns, mid, slot, deadline_hint,
                                                 armed=armed and not replayed)
        except (anyio.get_cancelled_exc_class(), StoreUnavailable):
            # Nobody waits any more: end the request (if Redis lets us) rather than leave it
            # open until its deadline; a reply that comes later is refused, not lost silently.
            with anyio.move_on_after(1, shield=True):
                await self._cancel_quietly(ns, mid, fence)
            raise

    async def _durable(self, ns: str, mid: str,
                       deadline_ms: int | None = None) -> tuple[Settled, int] | None:
        # Under a burst the read may queue behind many others; it may take until the
        # request's own deadline (when known), never less than the operation timeout.
        timeout_s = self._timeout_s if deadline_ms is None else max(
            self._timeout_s, deadline_ms / 1000 - time.time())
        state, reply, code, deadline = await guarded(
            self._limiter, timeout_s, "resolve",
            lambda: self.markers.fields(ns, mid, ("state", "reply", "code", "deadline")))
        if state is None:
            return None
        result = reply if state == "replied" else code
        return Settled(state, result or ""), int(deadline or 0)

    async def _await_outcome(self, ns: str, mid: str, slot: WaitSlot,
                             deadline_hint: int | None, *, armed: bool) -> MessageEnvelope:
        if armed and deadline_hint is not None:
            # armed before its accept: every settlement of it reaches the slot
            deadline_ms = deadline_hint
        else:
            view = await self._durable(ns, mid, deadline_hint)
            if view is None:
                raise UnknownMessage(ns, mid)
            current, deadline_ms = view
            if current.state in TERMINAL_STATES:  # settled before its waiter came
                fault_point("listener.before_wake")
                return _outcome(mid, current)
        end_s = deadline_ms / 1000 + self.settings.grace_ms / 1000
        while (wait_s := end_s - time.time()) > 0:
            woken_by = slot.event
            with anyio.move_on_after(wait_s):
                await woken_by.wait()
            if slot.outcome is None:
                break
            # A settled-stream entry is only a hint: anyone able to XADD could forge one.
            # The marker, written by the settle scripts alone, is the authority; a marker
            # that existed when the wait began and is gone now expired or was evicted.
            view = await self._durable(ns, mid, deadline_ms)
            if view is None:
                raise RequestExpired(mid)
            if view[0].state in TERMINAL_STATES:
                return _outcome(mid, view[0])
            slot.rearm(woken_by)
        settlement = await guarded(
            self._limiter, self._timeout_s, "timeout",
            lambda: self.markers.settle_failure(ns, mid, state="timed_out",
                                                code="request_timed_out"))
        if settlement.settled:
            with contextlib.suppress(SharedOSError):  # else the reconciler's sweep does it
                await self.markers.cascade(ns, mid)
            raise RequestTimedOut(mid)
        view = await self._durable(ns, mid)  # lost the race to a real settlement
        if view is None:  # the settle call above removed its id from the indexes
            raise RequestExpired(mid)
        if view[0].state not in TERMINAL_STATES:
            raise UnknownMessage(ns, mid)
        return _outcome(mid, view[0])

    @contextlib.asynccontextmanager
    async def watch_end(self, namespace: str, message_id: str) -> AsyncIterator[WaitSlot | None]:
        """A wake-up for any settlement of ``message_id`` while the block runs (a worker
        learns that the request its turn answers ended: a cancel, a timeout, a cascade).
        The wake-up is a hint to confirm durably (anyone able to XADD could forge one).
        Yields None when the router is not running or the stream cannot be read now."""
        listener = self._listener
        if listener is None:
            yield None
            return
        watching = listener.watch(namespace, message_id)
        try:
            slot = await watching.__aenter__()
        except StoreUnavailable:
            yield None
            return
        try:
            yield slot
        finally:
            await watching.__aexit__(None, None, None)

    def expect(self, namespace: str, message_id: str) -> bool:
        """Arm the waiter of a request about to be accepted (the transport's
        :class:`~sharedos_redis.transport.transport.ReplyWatch`): its waiter then skips
        its first durable read. False when the router is not running or the namespace
        is not read yet."""
        return self._listener is not None and self._listener.expect(namespace, message_id)

    def unexpect(self, namespace: str, message_id: str) -> None:
        """Disarm a waiter armed by :meth:`expect` whose request was not accepted."""
        if self._listener is not None:
            self._listener.unexpect(namespace, message_id)

    async def _cancel_quietly(self, ns: str, mid: str,
                              fence: tuple[str, str] | None = None) -> None:
        # the cancellation is re-raised regardless; the reconciler expires what stays open
        with contextlib.suppress(SharedOSError):
            if fence is not None:
                # A nested request is the parent turn's: an attempt that lost that turn (a
                # newer one re-attaches to the request) must not end it, and a parent that
                # ended cascades to it (as request_cascade_cancelled). Read, then settle:
                # a newer attempt can only claim after this one's lease expired.
                parent, attempt = fence
                state, attempts = await guarded(
                    self._limiter, self._timeout_s, "cancel",
                    lambda: self.markers.fields(ns, parent, ("state", "attempts")))
                if state != "running" or attempts != attempt:
                    return
            await guarded(self._limiter, self._timeout_s, "cancel",
                          lambda: self.cancel(ns, mid))

    async def settle_reply(self, namespace: str,
                           reply: MessageEnvelope | dict[str, Any]) -> Settlement:
        """Settle a request with its reply; a malformed dict is refused, never raised.

        Returns:
            The settlement; ``invalid_message_reply`` (cause = the first contract
            error's type) for a dict that is not a valid envelope, audited.

        Raises:
            StoreUnavailable: Redis failed.
        """
        if not isinstance(reply, MessageEnvelope):
            try:
                reply = MessageEnvelope.from_wire(reply)
            except ContractError as exc:
                cause = str(exc.errors[0].get("type", "invalid"))[:256] if exc.errors else None
                named = reply.get("replyTo") if isinstance(reply, dict) else None
                mid = named.strip() if isinstance(named, str) else ""
                await self.markers.audit_refusal(namespace, code="invalid_message_reply",
                                                 cause=cause or "invalid",
                                                 message_id=mid if 0 < len(mid) <= 256 else None)
                return Settlement(False, "invalid_message_reply", None, cause)
        return await self.markers.settle_reply(namespace, reply)

    async def settle_failure(self, namespace: str, message_id: str, *, code: str,
                             state: FailureState = "failed") -> Settlement:
        """End an open request without a reply; see :meth:`MarkerStore.settle_failure`.

        Raises:
            StoreUnavailable: Redis failed.
        """
        return await self.markers.settle_failure(namespace, message_id, state=state, code=code)

    async def cancel(self, namespace: str, message_id: str) -> Settlement:
        """Cancel an open request (``cancelled``, ``request_cancelled``); its waiter wakes.
        Its open descendants are cancelled too (``request_cascade_cancelled``), at once.

        Raises:
            StoreUnavailable: Redis failed.
        """
        settlement = await self.markers.settle_failure(namespace, message_id, state="cancelled",
                                                       code="request_cancelled")
        if settlement.settled:
            await self.markers.cascade(namespace, message_id)
        return settlement

    async def tree(self, namespace: str, trace_id: str) -> DelegationTree:
        """The delegation tree of a trace; see :func:`.tree.read_tree` (three round trips
        for any size).

        Raises:
            StoreUnavailable: Redis failed.
        """
        return await read_tree(self._redis, namespace, trace_id)

    async def pending(self, namespace: str, *, state: str | None = None,
                      agent: str | None = None, older_than_s: float | None = None,
                      limit: int = 100) -> list[PendingRequest]:
        """Open requests, earliest deadline first; see :func:`.inspection.list_pending`.

        Raises:
            StoreUnavailable: Redis failed.
        """
        return await list_pending(self._redis, namespace, state=state, agent=agent,
                                  older_than_s=older_than_s, limit=limit)

    async def recent(self, namespace: str, *, limit: int = 20) -> list[SettledRequest]:
        """The last requests that settled, newest first; see :func:`.inspection.list_recent`.

        Raises:
            StoreUnavailable: Redis failed.
        """
        return await list_recent(self._redis, namespace, limit=limit)

    async def timeline(self, namespace: str, message_id: str) -> list[AuditEvent]:
        """The audit events of one request, oldest first (admin path: scans the stream).

        Raises:
            UnknownMessage: no audit event names the request.
            StoreUnavailable: Redis failed.
        """
        return await read_timeline(self._redis, namespace, message_id)

