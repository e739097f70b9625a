"""What a runtime sees of a turn (SPEC §4), its host, its limits and its event log.

Owns :class:`TurnRequest`, the :class:`RuntimeHost` and :class:`RuntimePlugin`
ports, :class:`TurnLimits`, :class:`TurnHost` and :class:`EventLog`;
:mod:`~sharedos_redis.kernel.turn` re-exports the public names beside the
executor. A runtime never sees grants or authority; its only way to act is
``host.invoke_tool``, which goes through :meth:`Kernel.invoke_tool` with the
recipient's own context.

Limits: a **step** is one ``host.invoke_tool`` round, whatever its result
(refused, denied or run); a **tool call** is a step that reaches the kernel
(the tool is offered and the step limit was not hit). ``maxSteps`` defaults to
16, ``maxToolCalls`` to ``maxSteps``, ``timeoutMs`` to 120000; a refused call
is a result and the turn goes on. Imports no I/O library.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Final, Protocol

from .audit import audit_event
from .contracts import (
    AccessContext,
    AgentAddress,
    ExecutionEvent,
    ExecutionOptions,
    JsonValue,
    MessageEnvelope,
    ToolCall,
    ToolDefinition,
    ToolResult,
    format_timestamp,
)
from .kernel import Kernel
from .tools import record_outcome, tool_denied

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
    """A runtime's only way to act inside its turn."""

    async def invoke_tool(self, call: ToolCall) -> ToolResult:
        """Invoke one tool; refusals and failures are results."""
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

    def append(self, type: str, data: JsonValue) -> None:
        """Append one event stamped with the next sequence number and the clock."""
        self.events.append(ExecutionEvent(
            event_id=self._ids(), execution_id=self._execution_id, trace_id=self._trace_id,
            sequence=len(self.events), type=type, data=data,
            occurred_at=format_timestamp(self._clock())))


class TurnHost:
    """The concrete :class:`RuntimeHost` of one turn (counts steps and tool calls).

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
        self._steps = self._tool_calls = 0
        self.closed = False

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
            **({"code": error.code} if error is not None else {})})
        return result

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
            self._steps += 1
            if self._steps > self._limits.max_steps:
                refusal = ("step_limit_exceeded", "step_limit")
            elif call.tool not in self._offered:
                refusal = ("tool_unavailable", "not_offered")
            else:
                self._tool_calls += 1
                if self._tool_calls > self._limits.max_tool_calls:
                    refusal = ("tool_call_limit_exceeded", "tool_call_limit")
        if refusal is None:
            return await self._kernel.invoke_tool(self._context, call)
        code, cause = refusal
        result = tool_denied(call, format_timestamp(self._kernel.clock()), code)
        await record_outcome(self._kernel.audit, audit_event(
            self._context, "tool.invoked", "denied", at=result.completed_at, tool=call.tool,
            operation_id=call.id, reason=code, cause=cause))
        return result
