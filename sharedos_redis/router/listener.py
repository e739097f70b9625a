"""The per-process settlement listener: one Redis connection wakes many local waiters.

Owns ``SettledListener`` (one task, one dedicated connection from the client's pool,
``XREAD BLOCK`` over the ``Keys.settled`` streams of the namespaces that have
waiters; on a Redis Cluster one read per hash slot, each on its node, since one
``XREAD`` may not span slots) and ``guarded`` (how every waiter-side Redis call is
bounded: a shared ``anyio.CapacityLimiter`` plus a timeout). Blocked reads are never cancelled (a
cancelled blocked read misbehaves on fakeredis and costs a reconnect on Redis):
the loop uses short blocks and a stop flag. Imports no arq.

Race-free order: a namespace's start position is fixed (the stream's last id, or
``0-0``) before any waiter of it makes its durable marker check, so a settlement
either precedes the check (the check sees it) or follows the position (the
listener delivers it). After a broken connection every registered waiter's marker
is re-checked durably, so no wake-up is lost even if entries were trimmed.

Armed waiters skip that first check: :meth:`SettledListener.expect`, called by the
transport *before* its accept script runs, registers the slot while the namespace
is already read, so every settlement of the request (all follow the accept) is
delivered to it. A reconnect before the waiter arrives makes it check durably.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any, TypeVar

import anyio
import anyio.lowlevel
from anyio.abc import TaskStatus
from redis.asyncio import Redis
from redis.crc import key_slot

from ..errors import SharedOSError, StoreUnavailable
from ..faults import fault_point
from ..store.boundary import STORE_ERRORS, Backoff, store_unavailable
from ..store.cluster import is_cluster
from ..store.keys import TERMINAL_STATES, Keys

__all__ = ["Settled", "SettledListener", "WaitSlot", "guarded"]

log = logging.getLogger("sharedos_redis.router")
_T = TypeVar("_T")
_RECHECK_CHUNK = 200


def _text(value: object) -> str:
    return value.decode() if isinstance(value, bytes) else "" if value is None else str(value)


def _entry_field(raw: Any, name: str) -> object:
    """One field of a stream entry read with or without ``decode_responses``."""
    value = raw.get(name.encode())
    return raw.get(name) if value is None else value


async def guarded(limiter: anyio.CapacityLimiter, timeout_s: float, operation: str,
                  call: Callable[[], Awaitable[_T]]) -> _T:
    """Run one Redis call under ``limiter``, bounded by ``timeout_s``.

    Raises:
        StoreUnavailable: Redis failed or did not answer in time.
    """
    try:
        with anyio.fail_after(timeout_s):  # the wait for a limiter token counts too
            async with limiter:
                return await call()
    except TimeoutError as exc:
        raise StoreUnavailable(operation, "timed out") from exc
    except STORE_ERRORS as exc:
        raise store_unavailable(operation, exc) from exc


@dataclass(frozen=True)
class Settled:
    """What one settlement entry carries: the terminal state and the reply JSON or code."""

    state: str
    result: str


class WaitSlot:
    """The local wake-up of one (namespace, message id); shared by its waiters."""

    __slots__ = ("event", "outcome", "refs", "unsure")

    def __init__(self) -> None:
        self.event = anyio.Event()
        self.outcome: Settled | None = None
        self.refs = 0
        self.unsure = False  # armed, then the connection broke: check the marker durably

    def settle(self, outcome: Settled) -> None:
        """Record the first outcome and wake the waiters (later ones are ignored)."""
        if self.outcome is None:
            self.outcome = outcome
            self.event.set()

    def rearm(self, woken_by: anyio.Event) -> None:
        """Forget a wake-up the marker did not confirm (once per ``woken_by`` event)."""
        if self.event is woken_by:
            self.event, self.outcome = anyio.Event(), None


class _Stream:
    __slots__ = ("error", "idle_since", "key", "namespace", "position", "ready", "waiters")

    def __init__(self, namespace: str) -> None:
        self.namespace, self.key = namespace, Keys(namespace).settled
        self.ready = anyio.Event()
        self.position = "0-0"
        self.error = False
        self.waiters = 0
        self.idle_since = time.monotonic()


class SettledListener:
    """Reads settlement streams on one connection and wakes registered waiters.

    Args:
        redis: the client; the listener takes one connection of its pool for itself.
        limiter: bounds the concurrent Redis calls of waiters (shared with the router).
        block_ms: the ``XREAD BLOCK``; also how long :meth:`stop` may take.
        timeout_s: bound of each waiter-side call.
        linger_s: how long a namespace without waiters is still read.
    """

    def __init__(self, redis: Redis, *, limiter: anyio.CapacityLimiter, block_ms: int,
                 timeout_s: float, linger_s: float, count: int = 1000) -> None:
        self._redis, self._limiter = redis, limiter
        self._block_ms, self._timeout_s, self._linger_s = block_ms, timeout_s, linger_s
        self._count = count
        self._streams: dict[str, _Stream] = {}
        self._slots: dict[tuple[str, str], WaitSlot] = {}
        self._armed: dict[tuple[str, str], float] = {}  # armed, not yet watched: since
        self._changed = anyio.Event()
        self._stopping = False
        self._cluster = is_cluster(redis)

    def stop(self) -> None:
        """Ask the loop to end after its current read (at most ``block_ms``)."""
        self._stopping = True
        self._changed.set()

    async def run(self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        """The loop: start a reader per slot group of watched namespaces until stopped.

        On a single server or Sentinel there is one group (every namespace in one
        ``XREAD``, on one dedicated connection); on a cluster one per hash slot, each
        blocking on its node. A reader ends once its group has no stream left.
        """
        task_status.started()
        readers: set[int] = set()
        async with anyio.create_task_group() as tg:
            while not self._stopping:
                for group in {self._group(key) for key in self._positions()} - readers:
                    readers.add(group)
                    tg.start_soon(self._reader, group, readers)
                with anyio.move_on_after(self._block_ms / 1000):
                    await self._changed.wait()
                self._changed = anyio.Event()

    def _group(self, key: str) -> int:
        return key_slot(key.encode()) if self._cluster else 0

    def _positions(self, group: int | None = None) -> dict[Any, Any]:
        return {s.key: s.position for s in self._streams.values()
                if s.ready.is_set() and not s.error
                and (group is None or self._group(s.key) == group)}

    async def _reader(self, group: int, readers: set[int]) -> None:
        """Read one slot group until it is empty or the listener stops; reconnect and
        re-check every waiter after a failed read."""
        conn = self._connection()
        backoff = Backoff("settlement listener", log, max_s=1.0)
        try:
            while not self._stopping:
                positions = self._positions(group)
                if not positions:
                    return  # no await since the check: a stream opened later restarts it
                try:
                    response = await self._read(conn, positions)
                except STORE_ERRORS as exc:
                    await self._close(conn)
                    await backoff.wait(store_unavailable("listen", exc))
                    conn = self._connection()
                    await self._recheck_quietly()
                    continue
                backoff.reset()
                self._deliver(response)
                self._drop_idle()
                # a client that answers without suspending (fakeredis) must not starve waiters
                await anyio.lowlevel.checkpoint()
        finally:
            readers.discard(group)
            self._changed.set()
            await self._close(conn)

    def _connection(self) -> Redis:
        # a cluster client takes a connection of the stream's node for each read
        return self._redis if self._cluster else self._redis.client()

    async def _close(self, conn: Redis) -> None:
        if conn is not self._redis:
            await _close(conn)

    async def _read(self, conn: Redis, positions: dict[Any, Any]) -> Any:
        return await conn.xread(positions, count=self._count, block=self._block_ms)

    def _deliver(self, response: Any) -> None:
        by_key = {s.key: s for s in self._streams.values()}
        for key, entries in response or []:
            stream = by_key.get(_text(key))
            if stream is None:
                continue
            for entry_id, raw in entries:
                stream.position = _text(entry_id)
                if not raw:
                    continue
                # most entries have no waiter here (a worker sees every settlement of
                # its namespace): decode the rest of an entry only for a waiter
                slot = self._slots.get((stream.namespace, _text(_entry_field(raw, "id"))))
                if slot is not None:
                    fault_point("listener.before_wake")
                    slot.settle(Settled(_text(_entry_field(raw, "state")),
                                        _text(_entry_field(raw, "result"))))

    def _drop_idle(self) -> None:
        cutoff = time.monotonic() - self._linger_s
        for key in [key for key, since in self._armed.items() if since < cutoff]:
            self.unexpect(*key)  # accepted, but nobody came to wait for it
        for ns, stream in list(self._streams.items()):
            if stream.waiters == 0 and stream.ready.is_set() and stream.idle_since < cutoff:
                del self._streams[ns]

    async def _recheck_quietly(self) -> None:
        try:
            await self.recheck()
        except SharedOSError as exc:
            log.warning("settlement re-check failed: %s", exc)

    async def recheck(self) -> None:
        """Read every unsettled waiter's marker durably; wake those terminal or gone.

        Raises:
            StoreUnavailable: Redis failed.
        """
        for key in self._armed:  # maybe not accepted yet: its waiter checks when it comes
            self._slots[key].unsure = True
        pending = [key for key, slot in self._slots.items()
                   if slot.outcome is None and key not in self._armed]
        for start in range(0, len(pending), _RECHECK_CHUNK):
            chunk = pending[start:start + _RECHECK_CHUNK]

            async def read(chunk: list[tuple[str, str]] = chunk) -> list[Any]:
                pipe = self._redis.pipeline(transaction=False)
                for ns, mid in chunk:
                    pipe.hmget(Keys(ns).message(mid), ["state", "reply", "code"])
                rows: list[Any] = await pipe.execute()
                return rows

            rows = await guarded(self._limiter, self._timeout_s, "recheck", read)
            for key, (state, reply, code) in zip(chunk, rows, strict=True):
                slot, st = self._slots.get(key), _text(state)
                if slot is not None and (st in TERMINAL_STATES or not st):
                    # a marker gone while watched expired: its waiter re-reads and ends typed
                    fault_point("listener.before_wake")
                    slot.settle(Settled(st, _text(reply if st == "replied" else code)))

    def expect(self, namespace: str, message_id: str) -> bool:
        """Arm the waiter of a request about to be accepted (synchronous; see the module
        doc): True when armed, False when the namespace is not read yet (the waiter then
        makes its durable check). Disarm with :meth:`unexpect` if it is not accepted."""
        key, stream = (namespace, message_id), self._streams.get(namespace)
        if stream is None or not stream.ready.is_set() or stream.error or key in self._armed:
            return False
        slot = self._slots.setdefault(key, WaitSlot())
        slot.refs += 1
        stream.waiters += 1
        self._armed[key] = time.monotonic()
        return True

    def unexpect(self, namespace: str, message_id: str) -> None:
        """Disarm an armed waiter that will not come (idempotent)."""
        if self._armed.pop((namespace, message_id), None) is not None:
            self._release(namespace, message_id)

    def _release(self, namespace: str, message_id: str) -> None:
        key = (namespace, message_id)
        slot = self._slots.get(key)
        if slot is not None:
            slot.refs -= 1
            if slot.refs == 0:
                del self._slots[key]
        stream = self._streams.get(namespace)
        if stream is not None:
            stream.waiters -= 1
            if stream.waiters == 0:
                stream.idle_since = time.monotonic()

    @asynccontextmanager
    async def watch(self, namespace: str, message_id: str) -> AsyncIterator[WaitSlot]:
        """Register a waiter for (namespace, message id); yields its slot.

        The namespace's read position is fixed before this yields (unless the waiter
        was armed, see :meth:`watch_request`), so the caller's durable check afterwards
        cannot miss a settlement.

        Raises:
            StoreUnavailable: the stream position could not be read.
        """
        async with self.watch_request(namespace, message_id) as (slot, _):
            yield slot

    @asynccontextmanager
    async def watch_request(self, namespace: str, message_id: str
                            ) -> AsyncIterator[tuple[WaitSlot, bool]]:
        """:meth:`watch`, also saying whether the waiter was armed before its accept
        (:meth:`expect`): then it needs no durable check before it waits.

        Raises:
            StoreUnavailable: the stream position could not be read.
        """
        key = (namespace, message_id)
        if self._armed.pop(key, None) is not None:  # its refs are ours now
            slot = self._slots[key]
            armed = not slot.unsure
        else:
            await self._join(namespace)
            slot = self._slots.setdefault(key, WaitSlot())
            slot.refs += 1
            armed = False
        try:
            yield slot, armed
        finally:
            self._release(namespace, message_id)

    async def _join(self, namespace: str) -> _Stream:
        while True:
            stream = self._streams.get(namespace)
            if stream is None:
                return await self._open(namespace)
            await stream.ready.wait()
            if stream.error:
                raise StoreUnavailable("listen", "settled stream position unavailable")
            if self._streams.get(namespace) is stream:  # not dropped while we yielded
                stream.waiters += 1
                return stream

    async def _open(self, namespace: str) -> _Stream:
        stream = _Stream(namespace)
        stream.waiters = 1
        self._streams[namespace] = stream
        try:
            last = await guarded(self._limiter, self._timeout_s, "listen",
                                 lambda: self._redis.xrevrange(stream.key, "+", "-", count=1))
        except BaseException:
            stream.error = True
            del self._streams[namespace]
            stream.ready.set()
            raise
        stream.position = _text(last[0][0]) if last else "0-0"
        stream.ready.set()
        self._changed.set()
        return stream


async def _close(conn: Redis) -> None:
    with anyio.move_on_after(1, shield=True):
        # a broken connection may fail to close; it is dropped either way
        with contextlib.suppress(*STORE_ERRORS):
            await conn.aclose()
