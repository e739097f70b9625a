"""``TurnRunner``: one recipient turn for one accepted request (the ``run_turn`` job).

Claims the turn lease on the marker, builds the recipient's own context (the
requester's grants are never loaded), runs the turn through the kernel's
TurnExecutor while renewing the lease, and settles the request: a succeeded
turn's output becomes a host-authored reply; any other ending settles a typed
failure at once so the requester does not wait for its deadline. Each attempt runs
as its own turn (a fresh turn id) and its settlement carries the attempt as fencing
token: a stale attempt's is refused ``turn_lease_lost``. A renewal that wakes late
(the loop was blocked) is logged as a WARNING.
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Final

import anyio
import sniffio

from ..errors import SharedOSError
from ..faults import fault_point
from ..kernel.contracts import (
    ExecutionCancelled,
    ExecutionDenied,
    ExecutionEscalated,
    ExecutionFailed,
    ExecutionResult,
    ExecutionSucceeded,
    MessageEnvelope,
    format_timestamp,
)
from ..kernel.ids import new_id
from ..observability import telemetry
from ..router.listener import WaitSlot
from ..store.keys import TERMINAL_STATES
from ..store.markers import Settlement, TurnClaim
from ..transport.deadlines import deadline_scope
from ..transport.turn_scope import TurnScope, turn_scope
from .effects import TurnEffects, tracking
from .host import MessagingHost
from .slots import Deadlocked, Signal, TurnSlot, TurnSlots, occupying

__all__ = ["DrainReport", "TurnRunner", "failure_code"]

log = logging.getLogger("sharedos_redis.worker")

_FAILURE_CODES: Final = {
    "denied": "recipient_turn_denied",
    "failed": "recipient_turn_failed",
    "cancelled": "recipient_turn_cancelled",
    "escalated": "recipient_turn_escalated",
}


_LATE_S: Final = 0.25
"""A renewal waking later than this (and than half its period) is logged as late."""

_WATCH_AFTER_S: Final = 0.05
"""A turn still running after this long starts watching its request's settlements (a
cancel, a timeout, a cascade then stops it at once) and renews once, which confirms
that nothing ended it before the watch began. A quicker turn is never watched: it
costs the worker's listener no read per settlement."""


def _taken_over(settlement: Settlement) -> bool:
    """A fenced settlement refused because another attempt claimed the request since."""
    return settlement.code == "turn_lease_lost" and settlement.cause == "attempt"


def failure_code(result: ExecutionResult) -> str:
    """The request failure code a non-succeeded turn settles with."""
    return _FAILURE_CODES[result.status]


@dataclass
class _Active:
    """A turn this runner is running: how to stop it and what it has caused."""

    agent: str
    turn_id: str = field(default_factory=new_id)  # this attempt's own identity (ADR 0027)
    effects: TurnEffects = field(default_factory=TurnEffects)
    scope: anyio.CancelScope = field(default_factory=anyio.CancelScope)
    handing_back: bool = False


@dataclass(frozen=True)
class DrainReport:
    """How a drain ended: turns that finished in the grace, handed back, interrupted."""

    finished: int
    handed_back: int
    interrupted: int


class TurnRunner:
    """Runs recipient turns for one host; safe to call twice for the same request.

    Args:
        host: the messaging host.
        worker: this worker's name (recorded on the lease).
        on_hand_back: ``(namespace, message_id)`` → wake the handed-back turn elsewhere.
    """

    def __init__(self, host: MessagingHost, *, worker: str,
                 on_hand_back: Callable[[str, str], Awaitable[None]] | None = None) -> None:
        self.host = host
        self.worker = worker
        self.on_hand_back = on_hand_back
        self.accepting = True
        self.active: dict[str, _Active] = {}
        self.outcomes: Counter[str] = Counter()
        self._turn_ended = Signal()  # what a drain waits for
        self._claiming = 0

    async def run(self, namespace: str, message_id: str, *, relayed: str | None = None) -> str:
        """Claim and run the turn of request ``message_id``; returns what happened.
        ``relayed``: the outbox entry the relay handed over, retired by the claim.

        Returns:
            ``"replied"``, a failure code, ``"handed_back"``, or the claim outcome
            (``busy``, ``closed``, ``missing``, ``dead``) when there was nothing to run;
            ``"draining"`` when this runner no longer takes turns.
        """
        host, s = self.host, self.host.settings
        if namespace != host.namespace:
            return "wrong_namespace"
        if not self.accepting:
            return "draining"
        fault_point("turn.before_claim")
        self._claiming += 1  # a drain waits for claims under way too
        try:
            claim = await host.markers.claim_turn(
                namespace, message_id, lease_ms=int(s.lease_s * 1000),
                max_attempts=s.max_attempts, worker=self.worker, relayed=relayed)
        finally:
            self._claiming -= 1
            self._wake_drain()
        if claim.outcome == "dead":  # dead-lettered by this claim: end its open descendants
            await host.markers.cascade(namespace, message_id)
        if claim.outcome != "claimed" or claim.request is None:
            return claim.outcome
        if not self.accepting:  # a drain began during the claim: nothing ran, hand it back
            released = await self._release_unstarted(message_id, claim.attempt)
            self.outcomes[released] += 1
            return released
        fault_point("turn.after_claim")
        request = claim.request
        receiver = request.receiver
        if receiver.kind != "agent" or host.agent_spec(receiver.id) is None:
            await host.markers.settle_failure(namespace, message_id, state="failed",
                                              code="recipient_unknown", attempt=claim.attempt)
            return "recipient_unknown"
        active = self.active[message_id] = _Active(receiver.id)
        started = time.monotonic()
        outcome = "error"
        hooks = telemetry()
        try:
            with hooks.turn_span(namespace, request, attempt=claim.attempt,
                                 traceparent=claim.traceparent,
                                 tools=host.tool_definitions if hooks.enabled else ()) as span:
                outcome = await self._run_claimed(claim, request, active)
                span.outcome(outcome)
            return outcome
        finally:
            del self.active[message_id]
            self.outcomes[outcome] += 1
            self._wake_drain()
            log.info("turn namespace=%s agent=%s message=%s attempt=%d outcome=%s "
                     "duration_ms=%d turn_id=%s", namespace, receiver.id, message_id,
                     claim.attempt, outcome, (time.monotonic() - started) * 1000,
                     active.turn_id, extra={"turn": {
                         "namespace": namespace, "agent": receiver.id, "message_id": message_id,
                         "attempt": claim.attempt, "outcome": outcome, "turn_id": active.turn_id,
                         "duration_ms": round((time.monotonic() - started) * 1000, 1)}})

    async def _run_claimed(self, claim: TurnClaim, request: MessageEnvelope,
                           active: _Active) -> str:
        namespace = self.host.namespace
        result, lost = await self._run_leased(claim, request, active)
        if lost:  # another attempt took the turn, or the request ended: nothing to settle
            state, attempts = await self.host.markers.fields(namespace, request.id,
                                                             ("state", "attempts"))
            ended = state in TERMINAL_STATES and attempts == str(claim.attempt)
            return "request_closed" if ended else "lease_lost"
        if result is None:  # stopped by a drain
            return await self._hand_back(request.id, claim.attempt, active)
        fault_point("turn.before_settle")
        with telemetry().settle_span(namespace, request):
            outcome = await self._settle(namespace, request, result, claim.attempt)
        fault_point("turn.after_settle")
        return outcome

    async def _run_leased(self, claim: TurnClaim, request: MessageEnvelope,
                          active: _Active) -> tuple[ExecutionResult | None, bool]:
        """Run the turn while a sibling task renews the lease (started once the turn has
        run for ``_WATCH_AFTER_S``); returns the result (None when it was stopped) and
        whether the lease was lost."""
        host, s = self.host, self.host.settings
        remaining_ms = claim.deadline_ms - int(time.time() * 1000)
        timeout_ms = max(1, min(int(s.turn_timeout_s * 1000), remaining_ms))
        execution = host.execution_request(
            active.agent, request, execution_id=f"{request.id}#{claim.attempt}",
            timeout_ms=timeout_ms)
        result: ExecutionResult | None = None
        lost = False
        with active.scope, tracking(active.effects):
            async with anyio.create_task_group() as tg:
                began = time.monotonic()
                renewing = closed = False

                async def renew() -> None:
                    nonlocal lost
                    # the request ending under the turn (cancel, timeout, cascade) wakes the
                    # renewal at once; the renewal then fails and the turn is stopped
                    late_s = time.monotonic() - began - _WATCH_AFTER_S
                    if late_s > _LATE_S:  # the watchdog, for the first renewal too
                        self._warn_late(request.id, claim.attempt, late_s,
                                        expired=late_s >= s.lease_s)
                    async with host.router.watch_end(host.namespace, request.id) as ended:
                        lost = not await self._renew_until_lost(request.id, claim.attempt,
                                                                ended, at_once=True)
                    tg.cancel_scope.cancel()

                def start_renewal() -> None:
                    nonlocal renewing
                    if not (renewing or closed):
                        renewing = True
                        # a loop callback has no current task that would tell sniffio
                        # (hence anyio) the library; its context is this turn's copy
                        sniffio.current_async_library_cvar.set("asyncio")
                        tg.start_soon(renew)

                # The renewal task is started by a loop timer once the turn has run for
                # _WATCH_AFTER_S, in a copy of the turn's context (as if started here): a
                # quicker turn (most) never creates, nor cancels, one.
                timer = asyncio.get_running_loop().call_later(
                    _WATCH_AFTER_S, start_renewal, context=contextvars.copy_context())
                try:
                    # a fresh turn identity per attempt (ADR 0027): its own grant snapshot,
                    # named by its audit records; the attempt fences what it causes
                    scope = TurnScope(self.host.namespace, request.id, claim.attempt,
                                      turn_id=active.turn_id)
                    with deadline_scope(claim.deadline_ms), turn_scope(scope):
                        result = await host.execute(active.agent, execution,
                                                    attempt=claim.attempt,
                                                    turn_id=scope.turn_id)
                finally:
                    closed = True  # nothing starts it any more
                    timer.cancel()
                if renewing:  # else the group has no task to stop (cancelling costs too)
                    tg.cancel_scope.cancel()
        return (None if lost else result), lost

    async def _renew_until_lost(self, message_id: str, attempt: int,
                                ended: WaitSlot | None = None, *, at_once: bool = False
                                ) -> bool:
        """Renew the lease every third of it, and at once when ``ended`` wakes (a
        settlement of the request was seen) or, with ``at_once``, when called; returns
        False once the request ended or another attempt holds it.

        A watchdog: waking late means the event loop was blocked (a runtime calling
        blocking code); that is logged as a WARNING naming the turn and how late. When
        the lease may have expired meanwhile, the renewal's answer decides: still ours,
        the turn goes on; another attempt's, the turn is stopped (and whatever it does
        before it stops is fenced: its tool calls and settlement are refused).
        """
        host, s = self.host, self.host.settings
        period = s.lease_s / 3
        renewed = time.monotonic()
        first = at_once
        while True:
            slept = time.monotonic()
            woken_by = None if ended is None else ended.event
            with anyio.move_on_after(0 if first else period) as waited:
                await (anyio.sleep_forever() if woken_by is None else woken_by.wait())
            hinted = False
            if ended is not None and woken_by is not None and woken_by.is_set():
                hinted = True  # a settlement entry is only a hint: the renewal confirms it
                ended.rearm(woken_by)
            late_s = time.monotonic() - slept - (0 if first else period)
            first = False
            if waited.cancelled_caught and late_s > max(_LATE_S, period / 2):
                self._warn_late(message_id, attempt, late_s,
                                expired=time.monotonic() - renewed >= s.lease_s)
            try:
                ok = await host.markers.renew_lease(
                    host.namespace, message_id, lease_ms=int(s.lease_s * 1000), attempt=attempt)
            except SharedOSError as exc:  # Redis blipped: try again next period
                if time.monotonic() - renewed < s.lease_s:
                    log.warning("lease renewal of %s failed: %s", message_id, exc)
                    continue
                # unrenewed for a whole lease: another worker may re-run it; stop this one
                log.warning("lease of %s not renewed for %.1fs: stopping the turn",
                            message_id, s.lease_s)
                return False
            if not ok:
                if hinted:
                    log.info("turn %s/%s attempt %d: its request ended; stopping it",
                             host.namespace, message_id, attempt)
                else:
                    log.warning("turn %s/%s attempt %d lost its lease to another attempt: "
                                "stopping it", host.namespace, message_id, attempt)
                return False
            renewed = time.monotonic()

    def _warn_late(self, message_id: str, attempt: int, late_s: float, *,
                   expired: bool) -> None:
        """The watchdog's WARNING: the renewal of this turn's lease woke ``late_s`` late."""
        namespace = self.host.namespace
        log.warning("turn %s/%s attempt %d: lease renewal woke %.1fs late (the event loop "
                    "was blocked)%s", namespace, message_id, attempt, late_s,
                    "; the lease may have expired, checking" if expired else "",
                    extra={"lease_late": {"namespace": namespace, "message_id": message_id,
                                          "attempt": attempt, "late_s": round(late_s, 3)}})

    async def _hand_back(self, message_id: str, attempt: int, active: _Active) -> str:
        """A drain stopped this turn: run it again elsewhere if that repeats no effect,
        else end the request with ``recipient_turn_interrupted``."""
        host, s = self.host, self.host.settings
        if active.effects.retryable:
            return await self._release_unstarted(message_id, attempt)
        outcome = "lease_lost"
        with anyio.CancelScope(shield=True):
            # settle only while this attempt still holds the lease (never another's run)
            if await host.markers.renew_lease(host.namespace, message_id,
                                              lease_ms=int(s.lease_s * 1000), attempt=attempt):
                outcome = "recipient_turn_interrupted"
                await host.markers.settle_failure(host.namespace, message_id, state="failed",
                                                  code=outcome, attempt=attempt)
        return outcome

    async def _release_unstarted(self, message_id: str, attempt: int) -> str:
        """Give a turn that caused no non-repeatable effect back for another worker."""
        host = self.host
        with anyio.CancelScope(shield=True):
            if not await host.markers.release_turn(host.namespace, message_id,
                                                   attempt=attempt):
                return "lease_lost"  # another attempt holds it, or it ended meanwhile
            if self.on_hand_back is not None:
                await self.on_hand_back(host.namespace, message_id)
        return "handed_back"

    def _wake_drain(self) -> None:
        """Wake a waiting drain: a turn ended or a claim under way returned."""
        self._turn_ended.fire()

    async def drain(self, grace_s: float) -> DrainReport:
        """Stop taking turns, let running ones finish within ``grace_s``, then hand back
        (or interrupt) the rest; returns once none runs (bounded by ``grace_s`` + 10 s)."""
        self.accepting = False
        before = dict(self.outcomes)
        with anyio.move_on_after(grace_s):
            while self.active or self._claiming:
                await self._turn_ended.wait()
        finished = sum(self.outcomes.values()) - sum(before.values())
        for active in self.active.values():
            active.handing_back = True
            active.scope.cancel()
        with anyio.move_on_after(10):
            while self.active or self._claiming:
                await self._turn_ended.wait()
        return DrainReport(finished=finished,
                           handed_back=self.outcomes["handed_back"] - before.get("handed_back", 0),
                           interrupted=self.outcomes["recipient_turn_interrupted"]
                           - before.get("recipient_turn_interrupted", 0))

    async def _settle(self, namespace: str, request: MessageEnvelope,
                      result: ExecutionResult, attempt: int) -> str:
        """Settle with the turn's result, fenced by ``attempt``: refused (``turn_lease_lost``)
        when another attempt runs the request meanwhile or it ended."""
        markers = self.host.markers
        if isinstance(result, ExecutionSucceeded):
            reply = MessageEnvelope(
                id=new_id(), sender=request.receiver, receiver=request.sender,
                purpose=request.purpose, payload=result.output, trace_id=request.trace_id,
                created_at=format_timestamp(), reply_to=request.id)
            settlement = await markers.settle_reply(namespace, reply, attempt=attempt)
            if settlement.settled:
                return "replied"
            if _taken_over(settlement):
                log.warning("turn %s/%s attempt %d: reply refused, another attempt claimed "
                            "the request (turn_lease_lost)", namespace, request.id, attempt)
                return "turn_lease_lost"
            log.info("reply to %s refused: %s", request.id, settlement.code)
            # a fenced refusal because the request ended under this attempt: it closed
            return "request_closed" if settlement.code == "turn_lease_lost" else settlement.code
        assert isinstance(result, ExecutionDenied | ExecutionFailed | ExecutionCancelled
                          | ExecutionEscalated)
        code = failure_code(result)
        settlement = await markers.settle_failure(namespace, request.id, state="failed",
                                                  code=code, attempt=attempt)
        return "turn_lease_lost" if _taken_over(settlement) else code

    async def take_slot(self, slots: TurnSlots, namespace: str,
                        message_id: str) -> TurnSlot | None:
        """Wait for ``slots`` for a woken request; None when the request was failed
        ``request_deadlocked`` instead (every in-flight turn here waits on a request
        queued here for a slot: see ``slots``), so its parent gets a typed outcome now."""
        try:
            return await slots.take(message_id)
        except Deadlocked:
            log.warning("request %s/%s failed request_deadlocked: every in-flight turn waits "
                        "on a request queued here (max_in_flight)", namespace, message_id)
        try:
            await self.host.markers.settle_failure(namespace, message_id, state="failed",
                                                   code="request_deadlocked")
        except SharedOSError as exc:  # its deadline still ends it
            log.warning("request %s/%s not failed: %s", namespace, message_id, exc)
        return None

    async def run_in_slot(self, namespace: str, message_id: str, slot: TurnSlot, *,
                          relayed: str | None = None) -> str:
        """Run a woken turn in ``slot`` (given back while it waits for nested replies),
        then free the slot; returns the outcome (``"crashed"`` on an unexpected error).

        One broken turn must not stop the worker: an unexpected error is logged (its
        lease then expires and the reconciler re-runs it).
        """
        try:
            with occupying(slot):
                return await self.run_safely(namespace, message_id, relayed=relayed)
        except Exception:
            log.exception("turn %s/%s crashed", namespace, message_id)
            return "crashed"
        finally:
            slot.close()

    async def run_safely(self, namespace: str, message_id: str, *,
                         relayed: str | None = None) -> str:
        """:meth:`run`, logging (not raising) store failures: the lease then expires and
        the reconciler re-runs the turn."""
        try:
            return await self.run(namespace, message_id, relayed=relayed)
        except (SharedOSError, BaseExceptionGroup) as exc:
            # a store error inside the turn's task group arrives wrapped in a group
            if isinstance(exc, BaseExceptionGroup):
                matched, rest = exc.split(SharedOSError)
                if rest is not None:
                    raise
                exc = matched.exceptions[0] if matched is not None else exc
            log.warning("turn %s/%s not finished: %s", namespace, message_id, exc)
            return "error"
