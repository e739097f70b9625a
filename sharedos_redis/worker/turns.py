"""``TurnRunner``: one recipient turn for one accepted request (the ``run_turn`` job).

Claims the turn lease on the marker, builds the recipient's own context (the
requester's grants are never loaded), runs the turn through the kernel's
TurnExecutor while renewing the lease, and settles the request: a succeeded
turn's output becomes a host-authored reply; any other ending settles a typed
failure at once so the requester does not wait for its deadline.
"""

from __future__ import annotations

import logging
import time
from typing import Final

import anyio

from ..errors import SharedOSError
from ..faults import fault_point
from ..kernel.contracts import (
    ExecutionCancelled,
    ExecutionDenied,
    ExecutionFailed,
    ExecutionResult,
    ExecutionSucceeded,
    MessageEnvelope,
    format_timestamp,
)
from ..kernel.ids import new_id
from ..store.markers import TurnClaim
from ..transport.deadlines import deadline_scope
from .host import MessagingHost

__all__ = ["TurnRunner", "failure_code"]

log = logging.getLogger("sharedos_redis.worker")

_FAILURE_CODES: Final = {
    "denied": "recipient_turn_denied",
    "failed": "recipient_turn_failed",
    "cancelled": "recipient_turn_cancelled",
}


def failure_code(result: ExecutionResult) -> str:
    """The request failure code a non-succeeded turn settles with."""
    return _FAILURE_CODES[result.status]


class TurnRunner:
    """Runs recipient turns for one host; safe to call twice for the same request."""

    def __init__(self, host: MessagingHost, *, worker: str) -> None:
        self.host = host
        self.worker = worker

    async def run(self, namespace: str, message_id: str) -> str:
        """Claim and run the turn of request ``message_id``; returns what happened.

        Returns:
            ``"replied"``, a failure code, or the claim outcome (``busy``, ``closed``,
            ``missing``, ``dead``) when there was nothing to run.
        """
        host, s = self.host, self.host.settings
        if namespace != host.namespace:
            return "wrong_namespace"
        fault_point("turn.before_claim")
        claim = await host.markers.claim_turn(
            namespace, message_id, lease_ms=int(s.lease_s * 1000),
            max_attempts=s.max_attempts, worker=self.worker)
        if claim.outcome != "claimed" or claim.request is None:
            return claim.outcome
        fault_point("turn.after_claim")
        request = claim.request
        receiver = request.receiver
        if receiver.kind != "agent" or host.agent_spec(receiver.id) is None:
            await host.markers.settle_failure(namespace, message_id, state="failed",
                                              code="recipient_unknown")
            return "recipient_unknown"
        result = await self._run_leased(claim, request, receiver.id)
        if result is None:
            return "lease_lost"
        fault_point("turn.before_settle")
        outcome = await self._settle(namespace, request, result)
        fault_point("turn.after_settle")
        return outcome

    async def _run_leased(self, claim: TurnClaim, request: MessageEnvelope,
                          agent_id: str) -> ExecutionResult | None:
        """Run the turn while a sibling task renews the lease; None if the lease was lost."""
        host, s = self.host, self.host.settings
        remaining_ms = claim.deadline_ms - int(time.time() * 1000)
        timeout_ms = max(1, min(int(s.turn_timeout_s * 1000), remaining_ms))
        execution = host.execution_request(
            agent_id, request, execution_id=f"{request.id}#{claim.attempt}", timeout_ms=timeout_ms)
        result: ExecutionResult | None = None
        lost = False
        async with anyio.create_task_group() as tg:

            async def renew() -> None:
                nonlocal lost
                period = s.lease_s / 3
                while True:
                    await anyio.sleep(period)
                    try:
                        ok = await host.markers.renew_lease(
                            host.namespace, request.id, lease_ms=int(s.lease_s * 1000),
                            attempt=claim.attempt)
                    except SharedOSError as exc:  # Redis blipped: try again next period
                        log.warning("lease renewal of %s failed: %s", request.id, exc)
                        continue
                    if not ok:
                        lost = True
                        tg.cancel_scope.cancel()
                        return

            tg.start_soon(renew)
            with deadline_scope(claim.deadline_ms):
                result = await host.execute(agent_id, execution, attempt=claim.attempt)
            tg.cancel_scope.cancel()
        return None if lost else result

    async def _settle(self, namespace: str, request: MessageEnvelope,
                      result: ExecutionResult) -> str:
        markers = self.host.markers
        if isinstance(result, ExecutionSucceeded):
            reply = MessageEnvelope(
                id=new_id(), sender=request.receiver, receiver=request.sender,
                purpose=request.purpose, payload=result.output, trace_id=request.trace_id,
                created_at=format_timestamp(), reply_to=request.id)
            settlement = await markers.settle_reply(namespace, reply)
            if not settlement.settled:
                log.info("reply to %s refused: %s", request.id, settlement.code)
            return "replied" if settlement.settled else settlement.code
        assert isinstance(result, ExecutionDenied | ExecutionFailed | ExecutionCancelled)
        code = failure_code(result)
        await markers.settle_failure(namespace, request.id, state="failed", code=code)
        return code

    async def run_safely(self, namespace: str, message_id: str) -> str:
        """:meth:`run`, logging (not raising) store failures: the lease then expires and
        the reconciler re-runs the turn."""
        try:
            return await self.run(namespace, message_id)
        except SharedOSError as exc:
            log.warning("turn %s/%s not finished: %s", namespace, message_id, exc)
            return "error"
