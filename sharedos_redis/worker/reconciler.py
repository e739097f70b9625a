"""The reconciler: makes every accepted request reach exactly one terminal state.

Runs in every worker; each step is an atomic script or an idempotent wake, so
many reconcilers may run at once. One pass:

1. the relay claims outbox entries a dead relay left unacknowledged (XAUTOCLAIM);
2. requests past their deadline become ``timed_out`` (waiters wake);
3. with ``route_check``, requests to an agent whose route lease expired — no live worker
   serves it (``store.directory``) — that no worker runs (waiting, or running under an
   expired turn lease) fail ``route_unavailable`` at once instead of at their deadline
   (one slice of the open index per pass, read only while some agent's lease is expired);
4. running turns whose lease expired (worker killed) are woken again — the claim
   script re-runs them with attempt + 1, or dead-letters them at ``max_attempts``;
5. ``dispatched`` requests whose turn never started (job lost), and ``accepted`` ones
   that lost their outbox entry, are woken again (a sweep of the open index that starts
   once per ``claim_idle_s`` and reads one slice per pass); the same sweep cancels open
   requests whose parent ended without its cascade (a process died in between).

A request that times out here cancels its open descendants in the same pass
(``request_cascade_cancelled``, see :func:`~sharedos_redis.store.tree.cascade_cancel`).

Every step reads at most ``STEP_LIMIT`` index entries per pass, so a pass stays
bounded however large the indexes are. Ids whose record expired or was evicted
while open are removed from the indexes as the steps meet them (``MarkerStore.forget``:
dead letter ``request_expired``, waiter woken, warning logged), so they cannot
crowd out real work: a pass that met only such ids makes room for the next.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable
from typing import Final

import anyio
from anyio.abc import TaskStatus

from ..errors import SharedOSError
from ..faults import fault_point
from ..observability import telemetry
from ..store.boundary import Backoff
from ..store.tree import CASCADE_CODE
from ..transport.relay import OutboxRelay
from .host import MessagingHost

__all__ = ["STEP_LIMIT", "Reconciler", "RewakeHook"]

log = logging.getLogger("sharedos_redis.worker")

RewakeHook = Callable[[str, str, str], Awaitable[None]]
"""(namespace, message_id, reason) → wake the turn again (idempotent per reason)."""

STEP_LIMIT: Final = 500
"""The most index entries each step of one pass reads (overdue, leases, open sweep)."""


class Reconciler:
    """Periodic repair of one host's namespace."""

    def __init__(self, host: MessagingHost, relay: OutboxRelay, rewake: RewakeHook) -> None:
        self.host, self.relay, self.rewake = host, relay, rewake
        self._stopped = False
        self._next_stale_scan = 0.0
        self._sweep_start: int | None = None  # where the open-index sweep goes on
        self._route_start = 0  # where the unrouted scan goes on

    async def reconcile_once(self) -> dict[str, int]:
        """One pass; returns how many requests each step touched."""
        host, ns = self.host, self.host.namespace
        counts = {"claimed": await self.relay.claim_stale(), "timed_out": 0,
                  "cascaded": 0, "rerun": 0, "rewoken": 0}
        for message_id in await host.markers.overdue(ns, limit=STEP_LIMIT):
            settlement = await host.markers.settle_failure(
                ns, message_id, state="timed_out", code="request_timed_out")
            counts["timed_out"] += int(settlement.settled)
            if settlement.settled:
                counts["cascaded"] += len(await host.markers.cascade(ns, message_id))
        fault_point("reconciler.between")
        if host.settings.route_check:  # before re-running expired leases: none could run
            counts["unrouted"] = await self._fail_unrouted()
        for message_id in await host.markers.expired_leases(ns, limit=STEP_LIMIT):
            await self.rewake(ns, message_id, "lease")
            counts["rerun"] += 1
        if self._sweep_start is not None or time.monotonic() >= self._next_stale_scan:
            counts["rewoken"], orphans = await self._rewake_stale()
            counts["cascaded"] += await self._end_orphans(orphans)
        telemetry().reconciled(ns, counts)
        return counts

    async def _rewake_stale(self) -> tuple[int, dict[str, str]]:
        """Wake requests stuck in ``dispatched`` (job lost) or ``accepted`` with no outbox
        entry: one ``STEP_LIMIT`` slice of the open index per pass; a sweep over the whole
        index starts once per ``claim_idle_s``."""
        host, ns = self.host, self.host.namespace
        stale_ms = int(host.settings.claim_idle_s * 1000)
        if self._sweep_start is None:
            self._next_stale_scan = time.monotonic() + host.settings.claim_idle_s
        page = await host.markers.scan_open(
            ns, older_than_ms={"dispatched": stale_ms, "accepted": 3 * stale_ms},
            start=self._sweep_start or 0, count=STEP_LIMIT)
        self._sweep_start = page.next_start
        for message_id in page.stale:
            await self.rewake(ns, message_id, "stale")
        return len(page.stale), page.orphans

    async def _end_orphans(self, orphans: dict[str, str]) -> int:
        """Cancel open requests whose parent ended without cascading (a process died
        between the settlement and its cascade): cascade from the parent, or, when the
        parent's record is gone, end the orphan itself and cascade from it."""
        markers, ns, cancelled = self.host.markers, self.host.namespace, 0
        for message_id, parent in orphans.items():
            done = await markers.cascade(ns, parent)
            if message_id not in done:
                settlement = await markers.settle_failure(ns, message_id, state="cancelled",
                                                          code=CASCADE_CODE)
                if settlement.settled:
                    done = [message_id, *await markers.cascade(ns, message_id)]
            cancelled += len(done)
        return cancelled

    async def _fail_unrouted(self) -> int:
        """Fail waiting requests to agents no live worker serves (``route_unavailable``).

        A request is only accepted while its recipient's lease is live, so it can only
        meet a dead one here if every worker serving the agent stopped after the accept
        (or a rolling deploy dropped the agent): no worker will run it before its
        deadline. A request whose turn is running under a live turn lease is left alone.
        """
        host, ns = self.host, self.host.namespace
        dead = await host.directory.dead(ns, horizon_s=2 * host.settings.request_timeout_s)
        if not dead.agents:
            self._route_start = 0
            return 0
        page = await host.directory.unrouted(ns, dead, start=self._route_start,
                                             count=STEP_LIMIT)
        self._route_start = page.next_start or 0
        failed = 0
        for message_id in page.ids:
            settlement = await host.markers.settle_failure(
                ns, message_id, state="failed", code="route_unavailable")
            failed += int(settlement.settled)
        return failed

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
