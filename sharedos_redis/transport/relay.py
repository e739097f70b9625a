"""The outbox relay: turns durable outbox entries into recipient wake-ups.

Owns ``OutboxRelay``. One consumer group (``keys.RELAY_GROUP``) per namespace
outbox. For each entry the relay calls ``wake(namespace, message_id)`` FIRST,
then the ``dispatch_request`` script moves the marker ``accepted → dispatched``,
audits ``message.dispatched`` and XACKs + XDELs the entry. A wake that raises
leaves the entry pending; a relay that dies between wake and dispatch leaves it
in the group's pending list, and ``claim_stale`` (XAUTOCLAIM) repeats the wake —
so wake hooks must be idempotent (arq: job id = message id).

On a Redis Cluster one ``XREADGROUP`` may not span hash slots, so a relay serving
several namespaces reads each slot separately (concurrently, one step waits for
all); a worker's relay serves its own namespace, one slot.

Must not import router/ or worker/.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

import anyio
from anyio.abc import TaskStatus
from redis.asyncio import Redis
from redis.exceptions import ResponseError

from ..errors import SharedOSError
from ..faults import fault_point
from ..kernel.contracts import format_timestamp
from ..kernel.ids import new_id
from ..observability import telemetry
from ..store.boundary import STORE_ERRORS, Backoff, store_unavailable
from ..store.cluster import slot_groups
from ..store.keys import RELAY_GROUP, Keys
from ..store.limits import AUDIT_MAXLEN
from ..store.scripts import Scripts

__all__ = ["HandOverHook", "OutboxRelay", "WakeHook"]

_log = logging.getLogger(__name__)

WakeHook = Callable[[str, str], Awaitable[None]]
HandOverHook = Callable[[str, str, str], bool]
"""``(namespace, message_id, outbox entry id)`` → True when a turn of this process took
the entry: its claim retires the entry (``claim_turn``), so the relay neither wakes nor
dispatches it. An entry whose turn never claims stays pending and is taken over."""
"""``(namespace, message_id)``; must be idempotent (arq enqueue with job id = message id)."""

_Entry = tuple[Any, Mapping[Any, Any] | None]


def _missing_group(exc: ResponseError) -> bool:
    # Real Redis says NOGROUP; fakeredis words a missing stream differently.
    text = str(exc)
    return "NOGROUP" in text or "requires the key to exist" in text


def _field(fields: Mapping[Any, Any] | None, name: str) -> Any:
    return (fields or {}).get(name.encode(), (fields or {}).get(name))


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


class OutboxRelay:
    """Relays the outboxes of ``namespaces`` to ``wake``.

    Args:
        redis: the client; its socket timeout must exceed ``block_ms``.
        namespaces: the namespaces whose outboxes this relay serves.
        wake: the idempotent wake-up hook.
        consumer: this relay's consumer name in the group (unique per process).
        block_ms: how long one ``step`` blocks for new entries.
        claim_idle_ms: how long an entry must sit unacknowledged before
            ``claim_stale`` takes it over.
        batch: the most entries read per call.
        audit_maxlen: the audit stream's approximate MAXLEN.
        capacity: how many turns the wake hook can start now; a read takes at most
            that many entries (at least one), so a busy worker leaves the rest of the
            outbox to other workers' relays (the stream worker's backpressure).
        hand_over: tried before ``wake`` (see :data:`HandOverHook`): direct dispatch
            hands the entry to the turn, whose claim retires it in one script.
    """

    def __init__(
        self,
        redis: Redis,
        namespaces: Sequence[str],
        wake: WakeHook,
        *,
        consumer: str,
        block_ms: int = 1000,
        claim_idle_ms: int = 30_000,
        batch: int = 64,
        audit_maxlen: int = AUDIT_MAXLEN,
        capacity: Callable[[], int] | None = None,
        hand_over: HandOverHook | None = None,
    ) -> None:
        self._redis = redis
        self._scripts = Scripts(redis)
        self._keys = {Keys(ns).outbox: Keys(ns) for ns in dict.fromkeys(namespaces)}
        self._wake = wake
        self._consumer = consumer
        self._block_ms = block_ms
        self._claim_idle_ms = claim_idle_ms
        self._batch = batch
        self._audit_maxlen = audit_maxlen
        self._capacity = capacity
        self._hand_over = hand_over
        self._stopping = False
        self._stop_requested: anyio.Event | None = None
        self._finished: anyio.Event | None = None

    @property
    def block_ms(self) -> int:
        """How long one :meth:`step` blocks; bounds how long stopping takes."""
        return self._block_ms

    @property
    def stopped(self) -> anyio.Event:
        """Set once :meth:`run` has returned (access it inside the event loop)."""
        if self._finished is None:
            self._finished = anyio.Event()
        return self._finished

    async def ensure_groups(self) -> None:
        """Create the consumer group on every outbox (MKSTREAM, from id 0; idempotent).

        Raises:
            StoreUnavailable: Redis failed.
        """
        for outbox in self._keys:
            try:
                await self._redis.xgroup_create(outbox, RELAY_GROUP, id="0", mkstream=True)
            except ResponseError as exc:
                if "BUSYGROUP" not in str(exc):
                    raise store_unavailable("relay.ensure_groups", exc) from exc
            except STORE_ERRORS as exc:
                raise store_unavailable("relay.ensure_groups", exc) from exc

    async def step(self, *, block_ms: int | None = None) -> int:
        """Read new entries once (XREADGROUP, blocking up to ``block_ms``) and relay them.

        Returns:
            How many entries were retired (dispatched, or acked as stale).

        Raises:
            StoreUnavailable: Redis failed.
        """
        block = self._block_ms if block_ms is None else block_ms
        groups = slot_groups(self._redis, self._keys)
        if len(groups) == 1:
            return await self._step(groups[0], block)
        handled = 0

        async def one(outboxes: list[str]) -> None:
            nonlocal handled
            handled += await self._step(outboxes, block)

        async with anyio.create_task_group() as tg:  # a cluster: one read per slot
            for outboxes in groups:
                tg.start_soon(one, outboxes)
        return handled

    async def _step(self, outboxes: list[str], block: int) -> int:
        count = self._batch if self._capacity is None else max(
            1, min(self._batch, self._capacity()))
        try:
            streams = await self._redis.xreadgroup(
                RELAY_GROUP, self._consumer, dict.fromkeys(outboxes, ">"),
                count=count, block=block if block > 0 else None)
        except ResponseError as exc:
            if _missing_group(exc):
                await self.ensure_groups()
                return 0
            raise store_unavailable("relay.step", exc) from exc
        except STORE_ERRORS as exc:
            raise store_unavailable("relay.step", exc) from exc
        handled = 0
        for outbox, entries in streams or ():
            handled += await self._relay(self._keys[_text(outbox)], entries)
        return handled

    async def claim_stale(self) -> int:
        """Take over entries idle longer than ``claim_idle_ms`` (XAUTOCLAIM) and relay them.

        Returns:
            How many entries were retired.

        Raises:
            StoreUnavailable: Redis failed.
        """
        handled = 0
        for outbox, keys in self._keys.items():
            cursor: Any = "0-0"
            while True:
                reply = await self._autoclaim(outbox, cursor)
                cursor, entries = reply[0], reply[1]
                handled += await self._relay(keys, entries)
                if _text(cursor) == "0-0" or not entries:
                    break
        return handled

    async def run(self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        """Relay until :meth:`stop`; signals ``started`` once the groups exist.

        Redis failures are logged and retried after a short pause. :attr:`stopped`
        is set when this returns, however it ends.
        """
        stop_requested = self._stop_requested = anyio.Event()
        if self._stopping:
            stop_requested.set()
        try:
            await self.ensure_groups()
            task_status.started()
            last_claim = -float("inf")
            backoff = Backoff("outbox relay", _log)
            while not self._stopping:
                try:
                    if anyio.current_time() - last_claim >= self._claim_idle_ms / 2000:
                        last_claim = anyio.current_time()
                        await self.claim_stale()
                    await self.step()
                except SharedOSError as exc:  # mapped store errors; the loop never dies
                    await backoff.wait(exc, stop=stop_requested)
                except Exception as exc:  # a bug in one step must not stop relaying for good
                    _log.exception("outbox relay step failed")
                    await backoff.wait(exc, stop=stop_requested)
                else:
                    backoff.reset()
        finally:
            self.stopped.set()

    def stop(self) -> None:
        """Ask :meth:`run` to return after its current step (at most ``block_ms``)."""
        self._stopping = True
        if self._stop_requested is not None:
            self._stop_requested.set()

    async def _autoclaim(self, outbox: str, cursor: Any) -> Any:
        try:
            return await self._redis.xautoclaim(
                outbox, RELAY_GROUP, self._consumer, min_idle_time=self._claim_idle_ms,
                start_id=cursor, count=self._batch)
        except ResponseError as exc:
            if _missing_group(exc):
                await self.ensure_groups()
                return ["0-0", []]
            raise store_unavailable("relay.claim_stale", exc) from exc
        except STORE_ERRORS as exc:
            raise store_unavailable("relay.claim_stale", exc) from exc

    async def _relay(self, keys: Keys, entries: Sequence[_Entry]) -> int:
        handled = 0
        for entry_id, fields in entries:
            raw = _field(fields, "id")
            message_id = _text(raw) if raw is not None else None
            tp = _field(fields, "tp")
            with telemetry().dispatch_span(keys.namespace, message_id, _text(entry_id),
                                           _text(tp) if tp is not None else None):
                if message_id is not None:
                    fault_point("relay.before_wake")
                    if self._hand_over is not None and self._hand_over(
                            keys.namespace, message_id, _text(entry_id)):
                        fault_point("relay.after_wake")
                        handled += 1
                        continue
                    try:
                        await self._wake(keys.namespace, message_id)
                    except Exception:  # left pending: claim_stale retries the wake-up
                        _log.warning("wake-up of %s failed; left pending", message_id,
                                     exc_info=True)
                        continue
                    fault_point("relay.after_wake")
                await self._dispatch(keys, _text(entry_id), message_id)
            handled += 1
        return handled

    async def _dispatch(self, keys: Keys, entry_id: str, message_id: str | None) -> None:
        now = datetime.now(UTC)
        marker = keys.message(message_id) if message_id is not None else keys.prefix + "msg:"
        await self._scripts.call_named(
            "dispatch_request", [marker, keys.outbox, keys.audit], group=RELAY_GROUP,
            entry=entry_id, id=message_id or "", now=int(now.timestamp() * 1000),
            at=format_timestamp(now), event=new_id(), audit_maxlen=self._audit_maxlen)
