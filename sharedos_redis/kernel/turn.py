"""The recipient turn (SPEC §4): :class:`TurnExecutor`, plus the runtime-facing names.

``execute`` parses the request strictly, refuses a turn whose context is not
the executing agent's (``actor_mismatch``), whose message is not addressed to
it (``receiver_mismatch``) or does not carry the context's purpose and trace
(``message_context_mismatch``), then consumes ``sharedos.execution``/invoke.
A refused turn never starts its runtime. An admitted turn offers the kernel's
permission-filtered tools that the request names, runs the runtime under the
turn's deadline and returns an :class:`ExecutionResult` with its events.
Imports no I/O library.
"""

from __future__ import annotations

import copy
import logging
from collections.abc import Callable, Mapping
from datetime import datetime
from typing import Any

import anyio

from ..errors import ContractError, TurnFailure
from .audit import TURN_ID, audit_event
from .contracts import (
    AuditOutcome,
    Escalation,
    ExecutionCancelled,
    ExecutionDenied,
    ExecutionEscalated,
    ExecutionFailed,
    ExecutionRequest,
    ExecutionResult,
    ExecutionSucceeded,
    JsonValue,
    ToolDefinition,
    format_timestamp,
    parse_wire,
)
from .ids import new_id
from .kernel import Kernel
from .runtime_facade import RuntimeFacade
from .runtime_host import (
    DEFAULT_MAX_STEPS,
    DEFAULT_TIMEOUT_MS,
    EventLog,
    RuntimeHost,
    RuntimePlugin,
    TurnHost,
    TurnLimits,
    TurnRequest,
)
from .tools import protocol_error, queued_later, record_outcome

__all__ = [
    "DEFAULT_MAX_STEPS",
    "DEFAULT_TIMEOUT_MS",
    "RuntimeHost",
    "RuntimePlugin",
    "TurnExecutor",
    "TurnHost",
    "TurnLimits",
    "TurnRequest",
]

_log = logging.getLogger("sharedos_redis.turn")

_RUNTIME_FAILURES = frozenset({"driver_failed", "invalid_driver_decision",
                               "invalid_runtime_outcome"})
"""The codes a runtime may end its turn with by raising :class:`TurnFailure`."""

_AUDIT_OUTCOME: dict[str, AuditOutcome] = {
    "succeeded": "succeeded", "denied": "denied", "failed": "failed", "cancelled": "failed",
    "escalated": "escalated",
}


def _envelope_refusal(request: ExecutionRequest) -> str | None:
    """SPEC §4 steps 1-3: the first mismatch between context, agent and message."""
    # an address's wire form is its kind and the one id field that kind has
    context, message, agent = request.context, request.message, request.agent
    if (context.actor.kind, context.actor.id) != (agent.kind, agent.id):
        return "actor_mismatch"
    if (message.receiver.kind, message.receiver.id) != (agent.kind, agent.id):
        return "receiver_mismatch"
    if message.trace_id != context.trace_id or message.purpose != context.purpose:
        return "message_context_mismatch"
    return None


class TurnExecutor:
    """Runs one agent's turns through a :class:`RuntimePlugin`.

    Args:
        kernel: admission and every tool call go through it.
        runtime: the agent's turn logic.
        clock: the host clock (defaults to the kernel's).
        ids: id factory for events and host-built tool calls.
    """

    def __init__(self, kernel: Kernel, runtime: RuntimePlugin, *,
                 clock: Callable[[], datetime] | None = None,
                 ids: Callable[[], str] = new_id) -> None:
        self._kernel, self._runtime = kernel, runtime
        self._clock = clock or kernel.clock
        self._ids = ids

    @property
    def runtime(self) -> RuntimePlugin:
        """The agent's turn logic this executor runs."""
        return self._runtime

    def _now(self) -> str:
        return format_timestamp(self._clock())

    async def execute(self, request: ExecutionRequest | Mapping[str, Any], *,
                      attempt: int = 1, turn_id: str | None = None) -> ExecutionResult:
        """Admit and run one turn; every refusal or failure is a result.

        Args:
            request: the turn (a mapping is parsed strictly from the wire).
            attempt: 1 on the first run; higher only when re-run after a crash.
            turn_id: this run's identity (ADR 0027 turn lease isolation): its grant
                snapshot is its own and every audit record it causes names it
                (``metadata.turnId``). A fresh id when omitted; a host passes one per
                attempt, never the same one twice.

        Raises:
            ContractError: the request is malformed (UnsupportedProtocolVersion first).
        """
        if not isinstance(request, ExecutionRequest):
            request = ExecutionRequest.from_wire(request)
        # SharedOS resolves a turn's authority once: one grant snapshot for the whole turn
        # (use counters stay live, so maxUses is still spent exactly).
        turn_id = turn_id or new_id()
        token = TURN_ID.set(turn_id)
        try:
            with self._kernel.authorizer.snapshot(turn_id):
                return await self._execute(request, attempt)
        finally:
            TURN_ID.reset(token)

    async def _execute(self, request: ExecutionRequest, attempt: int) -> ExecutionResult:
        started = self._now()
        log = EventLog(request.execution_id, request.context.trace_id, self._ids, self._clock)
        code = _envelope_refusal(request)
        if code is None:
            decision = await self._kernel.admit_turn(request.context, request.agent)
            code = None if decision.allowed else decision.reason_code
        if code is not None:
            log.append("turn.denied", {"code": code})
            await self._audit(request, "turn.denied", "denied", code)
            return ExecutionDenied(**self._common(request, log, started),
                                   error=protocol_error(code))
        admitted = audit_event(
            request.context, "turn.admitted", "allowed", at=self._now(),
            receiver=request.agent, message_id=request.message.id,
            operation_id=request.execution_id)
        # The admission decision's own record (authorization.checked, consumed) was
        # written before we got here; a sink that writes in order in the background may
        # queue this one behind it. Otherwise it is a gate like any before-effect record.
        sink = self._kernel.audit
        if not queued_later(sink, admitted):
            try:
                await sink.record(admitted)
            except Exception:  # before-effect record missing: the runtime is not started
                return await self._end(request, log, started, "failed", "audit_unavailable")
        return await self._run(request, log, started, attempt)

    def _common(self, request: ExecutionRequest, log: EventLog, started: str) -> dict[str, Any]:
        return {"execution_id": request.execution_id, "trace_id": request.context.trace_id,
                "events": tuple(log.events), "started_at": started, "completed_at": self._now(),
                "metadata": dict(log.annotations) or None}

    async def _offered(self, request: ExecutionRequest) -> tuple[ToolDefinition, ...]:
        """The kernel's usable tools whose names the request lists (the kernel's definitions)."""
        wanted = {tool.name for tool in request.tools}
        usable = await self._kernel.list_tools(request.context)
        return tuple(tool for tool in usable if tool.name in wanted)

    async def _run(self, request: ExecutionRequest, log: EventLog, started: str,
                   attempt: int) -> ExecutionResult:
        """Run an admitted turn; a host cancellation is audited, then propagates."""
        try:
            return await self._run_admitted(request, log, started, attempt)
        except anyio.get_cancelled_exc_class():
            with anyio.move_on_after(1, shield=True):
                await self._audit(request, "turn.ended", "cancelled", "turn_cancelled")
            raise

    async def _run_admitted(self, request: ExecutionRequest, log: EventLog, started: str,
                            attempt: int) -> ExecutionResult:
        limits = TurnLimits.from_options(request.options)
        output: object = None
        failure: str | None = None
        with anyio.move_on_after(limits.timeout_ms / 1000) as deadline:
            tools = await self._offered(request)
            host = TurnHost(self._kernel, request.context, frozenset(t.name for t in tools),
                            limits, log, self._ids)
            turn = TurnRequest(
                execution_id=request.execution_id, agent=request.agent,
                message=request.message, tools=tools, attempt=attempt,
                state=copy.deepcopy(request.state), trace_id=request.context.trace_id,
                purpose=request.context.purpose)
            log.append("turn.started", {"messageId": request.message.id, "attempt": attempt,
                                        "tools": [t.name for t in tools]})
            try:
                output = await self._runtime.run(turn, RuntimeFacade(host))
            except TurnFailure as exc:
                failure = exc.code if exc.code in _RUNTIME_FAILURES else "runtime_failed"
                _log.warning("runtime of agent %s ended turn %s: %s", request.agent.id,
                             request.execution_id, exc, exc_info=exc.__cause__ is not None)
            except Exception:  # its text never leaves the turn; cancellation propagates
                failure = "runtime_failed"
                # the operator's log gets the traceback; the model and the audit get a code
                _log.error("runtime of agent %s raised in turn %s", request.agent.id,
                           request.execution_id, exc_info=True)
            finally:
                host.closed = True
        if deadline.cancel_called:
            return await self._end(request, log, started, "cancelled", "turn_cancelled")
        if host.escalation is not None:  # asked for a human: whatever it returned or raised
            return await self._end(request, log, started, "escalated", "escalation_requested",
                                   escalation=host.escalation)
        if failure is not None:
            return await self._end(request, log, started, "failed", failure)
        try:
            checked: JsonValue = parse_wire(JsonValue, output)
        except ContractError:
            return await self._end(request, log, started, "failed", "invalid_runtime_outcome")
        return await self._end(request, log, started, "succeeded", None, checked)

    async def _end(self, request: ExecutionRequest, log: EventLog, started: str, status: str,
                   code: str | None, output: JsonValue = None,
                   escalation: Escalation | None = None) -> ExecutionResult:
        log.append("turn.ended", {"status": status, **({"code": code} if code else {})})
        await self._audit(request, "turn.ended", status, code)
        common = self._common(request, log, started)
        if status == "succeeded":
            return ExecutionSucceeded(**common, output=output)
        if escalation is not None:
            return ExecutionEscalated(**common, escalation=escalation)
        if status == "cancelled":
            return ExecutionCancelled(**common, error=protocol_error(code or "turn_cancelled"))
        return ExecutionFailed(**common, error=protocol_error(code or "runtime_failed"))

    async def _audit(self, request: ExecutionRequest, type: Any, status: str,
                     code: str | None) -> None:
        await record_outcome(self._kernel.audit, audit_event(
            request.context, type, _AUDIT_OUTCOME[status], at=self._now(),
            receiver=request.agent, message_id=request.message.id,
            operation_id=request.execution_id, reason=code))

