"""The reconciler: makes every accepted request reach exactly one terminal state.

Runs in every worker; each step is an atomic script or an idempotent wake, so
many reconcilers may run at once. One pass:

1. the relay claims outbox entries a dead relay left unacknowledged (XAUTOCLAIM);
2. requests past their deadline become ``timed_out`` (waiters wake);
3. running turns whose lease expired (worker killed) are woken again — the claim
   script re-runs them with attempt + 1, or dead-letters them at ``max_attempts``;
4. ``dispatched`` requests whose turn never started (job lost), and ``accepted`` ones
   that lost their outbox entry, are woken again (a full scan, once per ``claim_idle_s``).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable

import anyio
from anyio.abc import TaskStatus

from ..errors import SharedOSError
from ..faults import fault_point
from ..store.boundary import Backoff
from ..transport.relay import OutboxRelay
from .host import MessagingHost

__all__ = ["Reconciler", "RewakeHook"]

log = logging.getLogger("sharedos_redis.worker")

RewakeHook = Callable[[str, str, str], Awaitable[None]]
"""(namespace, message_id, reason) → wake the turn again (idempotent per reason)."""


class Reconciler:
    """Periodic repair of one host's namespace."""

    def __init__(self, host: MessagingHost, relay: OutboxRelay, rewake: RewakeHook) -> None:
        self.host, self.relay, self.rewake = host, relay, rewake
        self._stopped = False
        self._next_stale_scan = 0.0

    async def reconcile_once(self) -> dict[str, int]:
        """One pass; returns how many requests each step touched."""
        host, ns = self.host, self.host.namespace
        counts = {"claimed": await self.relay.claim_stale(), "timed_out": 0,
                  "rerun": 0, "rewoken": 0}
        for message_id in await host.markers.overdue(ns):
            settlement = await host.markers.settle_failure(
                ns, message_id, state="timed_out", code="request_timed_out")
            counts["timed_out"] += int(settlement.settled)
        fault_point("reconciler.between")
        for message_id in await host.markers.expired_leases(ns):
            await self.rewake(ns, message_id, "lease")
            counts["rerun"] += 1
        if time.monotonic() >= self._next_stale_scan:
            counts["rewoken"] = await self._rewake_stale()
        return counts

    async def _rewake_stale(self) -> int:
        """Wake requests stuck in ``dispatched`` (job lost) or ``accepted`` with no outbox
        entry. The scan reads every open marker, so it runs once per ``claim_idle_s``."""
        host, ns = self.host, self.host.namespace
        stale_ms = int(host.settings.claim_idle_s * 1000)
        self._next_stale_scan = time.monotonic() + host.settings.claim_idle_s
        woken = 0
        stuck = [*await host.markers.stale(ns, state="dispatched", older_than_ms=stale_ms),
                 *await host.markers.stale(ns, state="accepted", older_than_ms=3 * stale_ms)]
        for message_id in stuck:
            await self.rewake(ns, message_id, "stale")
            woken += 1
        return woken

    async def run(self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        """Reconcile every ``reconcile_interval_s`` until :meth:`stop`."""
        task_status.started()
        backoff = Backoff("reconciler", log)
        while not self._stopped:
            try:
                await self.reconcile_once()
            except SharedOSError as exc:  # every store error is mapped: wait and resume
                await backoff.wait(exc)
                continue
            except Exception:  # a bug in one pass must not stop repairs for good
                log.exception("reconcile pass failed")
            else:
                backoff.reset()
            await anyio.sleep(self.host.settings.reconcile_interval_s)

    def stop(self) -> None:
        """Ask the loop to end after its current pass."""
        self._stopped = True
