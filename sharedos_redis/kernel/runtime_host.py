"""What a runtime sees of a turn (SPEC §4), its host, its limits and its event log.

Owns :class:`TurnRequest`, the :class:`RuntimeHost` and :class:`RuntimePlugin`
ports, :class:`TurnLimits`, :class:`TurnHost` and :class:`EventLog`;
:mod:`~sharedos_redis.kernel.turn` re-exports the public names beside the
executor. A runtime never sees grants or authority; its only way to act is
``host.invoke_tool``, which goes through :meth:`Kernel.invoke_tool` with the
recipient's own context.

Limits (SharedOS ADR 0012/0017): ``maxToolCalls`` is a hard ceiling over
**every** ``invoke_tool`` round, offered tool or not, refused or run; past it a
call is refused ``tool_call_limit_exceeded``. ``maxSteps`` bounds the steps a
runtime **declares** with ``host.declare_step()`` (the standard model runtime
declares one per model call); the host numbers them, so a runtime cannot
renumber its way back under the limit, and a call made in a step at or past
``maxSteps`` is refused ``step_limit_exceeded``. A runtime that declares no step
is bounded by the call ceiling alone. Refusals are results and the turn goes
on. ``maxSteps`` defaults to 16, ``maxToolCalls`` to ``maxSteps``, ``timeoutMs``
to 120000. ``host.annotate(key, value)`` states a fact for the record (ADR
0027): it lands in the result's ``metadata`` on every ending. Imports no I/O
library.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Final, Protocol

from ..errors import ContractError
from .audit import audit_event
from .contracts import (
    AccessContext,
    AgentAddress,
    Escalation,
    ExecutionEvent,
    ExecutionOptions,
    JsonValue,
    MessageEnvelope,
    ToolCall,
    ToolDefinition,
    ToolResult,
    format_timestamp,
    parse_wire,
)
from .escalation import ESCALATE, escalation_reason
from .kernel import Kernel
from .tools import record_outcome, tool_denied, tool_failed, tool_succeeded

__all__ = [
    "DEFAULT_MAX_STEPS",
    "DEFAULT_TIMEOUT_MS",
    "EventLog",
    "RuntimeHost",
    "RuntimePlugin",
    "TurnHost",
    "TurnLimits",
    "TurnRequest",
]

DEFAULT_MAX_STEPS: Final = 16
DEFAULT_TIMEOUT_MS: Final = 120_000


@dataclass(frozen=True)
class TurnRequest:
    """What a runtime sees of its turn: frozen, no grants, no authority.

    Attributes:
        execution_id: the turn's id.
        agent: the executing agent (the recipient).
        message: the message it answers (its id is the turn's idempotency key).
        tools: the permission-filtered tools it may call.
        attempt: 1 on the first run, more only after a crash.
        state: a private copy of the host-kept state, if any.
        trace_id: the trusted trace of the delegation tree.
        purpose: the host-bound purpose.
    """

    execution_id: str
    agent: AgentAddress
    message: MessageEnvelope
    tools: tuple[ToolDefinition, ...]
    attempt: int
    state: dict[str, Any] | None
    trace_id: str
    purpose: str


class RuntimeHost(Protocol):
    """A runtime's only way to act inside its turn.

    Attributes:
        limits: the turn's effective limits (its step budget and call ceiling).
    """

    @property
    def limits(self) -> TurnLimits:
        """The turn's effective limits."""
        ...

    def declare_step(self) -> int:
        """Open the next step and return its index (0, 1, ...).

        Calls made after it belong to that step; one made in a step at or past
        ``limits.max_steps`` is refused ``step_limit_exceeded``. Declaring is a
        claim, not a permission: it never widens what the runtime may do.
        """
        ...

    async def invoke_tool(self, call: ToolCall) -> ToolResult:
        """Invoke one tool; refusals and failures are results."""
        ...

    def annotate(self, key: str, value: JsonValue) -> None:
        """State one fact about the turn for its record (SharedOS ADR 0027).

        The value lands in the result's ``metadata`` under ``key`` on every ending,
        cancelled and failed included; the last write wins; a write after the turn
        closed is dropped. Descriptive only: nothing the host decides reads it.

        Raises:
            ContractError: ``key`` is empty or ``runtime``, or ``value`` is not JSON.
        """
        ...

    async def call(self, tool: str, arguments: dict[str, Any]) -> ToolResult:
        """Build a ToolCall (fresh id, the turn's traceId, now) and invoke it."""
        ...


class RuntimePlugin(Protocol):
    """One agent's turn logic."""

    async def run(self, turn: TurnRequest, host: RuntimeHost) -> JsonValue:
        """Run the turn; the return value is its output, raising fails it (runtime_failed)."""
        ...


@dataclass(frozen=True)
class TurnLimits:
    """The effective limits of one turn (defaults applied)."""

    max_steps: int = DEFAULT_MAX_STEPS
    max_tool_calls: int = DEFAULT_MAX_STEPS
    timeout_ms: int = DEFAULT_TIMEOUT_MS

    @classmethod
    def from_options(cls, options: ExecutionOptions | None) -> TurnLimits:
        """Apply the SPEC defaults to ``options``."""
        opts = options or ExecutionOptions()
        steps = opts.max_steps or DEFAULT_MAX_STEPS
        return cls(max_steps=steps, max_tool_calls=opts.max_tool_calls or steps,
                   timeout_ms=opts.timeout_ms or DEFAULT_TIMEOUT_MS)


class EventLog:
    """The append-only :class:`ExecutionEvent` list of one turn."""

    def __init__(self, execution_id: str, trace_id: str, ids: Callable[[], str],
                 clock: Callable[[], datetime]) -> None:
        self._execution_id, self._trace_id = execution_id, trace_id
        self._ids, self._clock = ids, clock
        self.events: list[ExecutionEvent] = []
        self.annotations: dict[str, JsonValue] = {}

    def append(self, type: str, data: JsonValue) -> None:
        """Append one event stamped with the next sequence number and the clock."""
        self.events.append(ExecutionEvent(
            event_id=self._ids(), execution_id=self._execution_id, trace_id=self._trace_id,
            sequence=len(self.events), type=type, data=data,
            occurred_at=format_timestamp(self._clock())))


class TurnHost:
    """The concrete :class:`RuntimeHost` of one turn (counts declared steps and every call).

    Args:
        kernel: the kernel every call goes through.
        context: the recipient's own trusted context.
        offered: names of the tools offered to this turn.
        limits: the turn's limits.
        log: where ``tool.invoked`` events go.
        ids: the id factory for calls built by :meth:`call`.
    """

    def __init__(self, kernel: Kernel, context: AccessContext, offered: frozenset[str],
                 limits: TurnLimits, log: EventLog, ids: Callable[[], str]) -> None:
        self._kernel, self._context, self._offered = kernel, context, offered
        self._limits, self._log, self._ids = limits, log, ids
        self._step: int | None = None
        self._tool_calls = 0
        self.closed = False
        self.escalation: Escalation | None = None

    @property
    def limits(self) -> TurnLimits:
        """The turn's effective limits."""
        return self._limits

    def declare_step(self) -> int:
        """Open the next step and return its index (0-based)."""
        self._step = 0 if self._step is None else self._step + 1
        return self._step

    async def invoke_tool(self, call: ToolCall | Mapping[str, Any]) -> ToolResult:
        """Invoke one tool through the kernel with the recipient's own context.

        Raises:
            ContractError: ``call`` is a mapping that is not a valid ToolCall.
        """
        if not isinstance(call, ToolCall):
            call = ToolCall.from_wire(call)
        result = await self._invoke(call)
        error = getattr(result, "error", None)
        self._log.append("tool.invoked", {
            "callId": call.id, "tool": call.tool, "status": result.status,
            **({"step": self._step} if self._step is not None else {}),
            **({"code": error.code} if error is not None else {})})
        return result

    def annotate(self, key: str, value: JsonValue) -> None:
        """State one fact about the turn for its record (see :meth:`RuntimeHost.annotate`).

        Raises:
            ContractError: ``key`` is empty or ``runtime``, or ``value`` is not JSON.
        """
        if not key or key == "runtime":
            raise ContractError("annotation", [{"loc": ("key",), "type": "reserved",
                                                "msg": "an empty or reserved key"}])
        checked: JsonValue = parse_wire(JsonValue, value)
        if not self.closed:
            self._log.annotations[key] = checked

    async def call(self, tool: str, arguments: dict[str, Any]) -> ToolResult:
        """Build a ToolCall (fresh id, the turn's traceId, now) and invoke it.

        Raises:
            ContractError: ``tool`` or ``arguments`` are not valid in a ToolCall.
        """
        return await self.invoke_tool(ToolCall.from_wire({
            "id": self._ids(), "tool": tool, "arguments": arguments,
            "traceId": self._context.trace_id,
            "requestedAt": format_timestamp(self._kernel.clock())}))

    async def _invoke(self, call: ToolCall) -> ToolResult:
        refusal: tuple[str, str] | None = None
        if self.closed:
            refusal = ("tool_unavailable", "turn_ended")
        else:
            # Every round counts toward the ceiling, offered or not (ADR 0012), so a
            # runtime guessing tool names is bounded exactly like one calling real ones.
            self._tool_calls += 1
            if self._tool_calls > self._limits.max_tool_calls:
                refusal = ("tool_call_limit_exceeded", "tool_call_limit")
            elif self._step is not None and self._step >= self._limits.max_steps:
                refusal = ("step_limit_exceeded", "step_limit")
            elif call.tool not in self._offered:
                refusal = ("tool_unavailable", "not_offered")
        if refusal is None and call.tool == ESCALATE:
            return await self._escalate(call)
        if refusal is None:
            return await self._kernel.invoke_tool(self._context, call, within_turn=True)
        code, cause = refusal
        result = tool_denied(call, format_timestamp(self._kernel.clock()), code)
        await record_outcome(self._kernel.audit, audit_event(
            self._context, "tool.invoked", "denied", at=result.completed_at, tool=call.tool,
            operation_id=call.id, reason=code, cause=cause))
        return result

    async def _escalate(self, call: ToolCall) -> ToolResult:
        """Record the turn's request for a human (once); the turn then ends ``escalated``."""
        at = format_timestamp(self._kernel.clock())
        try:
            reason = escalation_reason(call)
        except ContractError:
            return tool_failed(call, at, "invalid_tool_arguments")
        if self.escalation is None:
            self.escalation = Escalation(reason=reason, reviewer=self._context.owner,
                                         requested_at=at)
            await record_outcome(self._kernel.audit, audit_event(
                self._context, "escalation.requested", "escalated", at=at, tool=call.tool,
                operation_id=call.id, reason="escalation_requested"))
        return tool_succeeded(call, at, {"escalation": "pending"})
