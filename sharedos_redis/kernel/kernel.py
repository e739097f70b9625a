"""The kernel: tool catalog and invocation, host-authored messaging, turn admission.

Owns :class:`Kernel`. A tool is usable only when it is registered, its tool
namespace is enabled in the context, and its capability is allowed for the
context's actor; discovery checks without consuming, invocation consumes
exactly once. Invocation repeats the discovery check first, so a tool the actor
cannot see is ``tool_unavailable`` exactly like an unregistered one (the real
reason goes to the audit ``cause`` only). A tool registered with a resolver
derives each call's exact requirement from its arguments inside its declared
ceiling: it is visible when some call could be allowed, and a call the
authorizer refuses is ``denied`` with the authorizer's own code. Inside a turn a
call minted before admission or after the operation instant is
``stale_request``. Every decision and outcome is audited. Imports no I/O library.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Coroutine, Mapping
from datetime import UTC, datetime
from typing import Any, Concatenate, ParamSpec, TypeVar

from ..errors import ContractError
from .audit import audit_event
from .authorizer import CapabilityAuthorizer
from .contracts import (
    AccessContext,
    AgentAddress,
    AuthorizationDecision,
    CapabilityRequirement,
    MessageDeliveryResult,
    MessageEnvelope,
    ToolCall,
    ToolDefinition,
    ToolResult,
    format_timestamp,
    timestamp_ms,
)
from .escalation import ESCALATE, ESCALATE_TOOL, ESCALATE_TOOL_NAMESPACE
from .ids import new_id
from .messaging import (
    MESSAGES_REQUEST,
    MESSAGES_REQUEST_TOOL,
    MessageService,
    invoke_requirement,
)
from .ports import (
    AuditSink,
    DelegationChainResolver,
    GrantRevocationSource,
    GrantSource,
    GrantUsageStore,
    HostCeiling,
    MessageRequestRouter,
    MessageTransport,
    PolicySource,
)
from .requirements import RequirementResolver, resolve_call_requirement
from .tools import (
    RegisteredTool,
    ToolHandler,
    ToolOutcome,
    ToolRegistry,
    checked_tool_result,
    record_outcome,
    tool_denied,
    tool_failed,
)

__all__ = ["Kernel", "utc_now"]

_INFRASTRUCTURE = frozenset({"audit_unavailable", "authority_unavailable",
                             "usage_store_unavailable"})
"""Discovery refusals that say nothing about the tool and are reported as themselves."""


def utc_now() -> datetime:
    """The default host clock: the current time in UTC."""
    return datetime.now(UTC)


_P = ParamSpec("_P")
_R = TypeVar("_R")


def _one_grant_set(
    method: Callable[Concatenate[Kernel, _P], Coroutine[Any, Any, _R]],
) -> Callable[Concatenate[Kernel, _P], Coroutine[Any, Any, _R]]:
    """Run a kernel operation inside one grant snapshot (see CapabilityAuthorizer.snapshot)."""

    @functools.wraps(method)
    async def wrapper(kernel: Kernel, /, *args: _P.args, **kwargs: _P.kwargs) -> _R:
        with kernel.authorizer.snapshot():
            return await method(kernel, *args, **kwargs)

    return wrapper


class Kernel:
    """The SharedOS kernel of one host.

    Args:
        grants: the host's trusted grant source.
        audit: the append-only audit sink.
        usage: atomic use counters for ``maxUses`` grants (None fails those closed).
        transport: the delivery path for messages (needed by send and messages.request).
        router: resolves replies (``messages.request`` is offered only with both).
        message_ids: the trusted message id factory (never a tool-call id).
        clock: the host clock for timestamps the kernel writes; also the operation
            instant at which grant expiry is decided.
        revocations: live revocation (SharedOS ADR 0027); without it a turn keeps
            the grants it was admitted with and a revocation reaches the next turn.
        chains: the trusted resolver of delegated grants' ancestors (ADR 0008); without
            it a delegated grant allows nothing (``delegation_chain_unverified``).
        ceiling / policies: the host ceiling (ADR 0020), which can only deny
            (``host_policy_denied``), and the policy it reads, loaded once per turn.

    Attributes:
        authorizer: the :class:`CapabilityAuthorizer` every decision goes through.
        audit: the audit sink.
        clock: the host clock.
    """

    def __init__(self, *, grants: GrantSource, audit: AuditSink,
                 usage: GrantUsageStore | None = None,
                 transport: MessageTransport | None = None,
                 router: MessageRequestRouter | None = None,
                 message_ids: Callable[[], str] = new_id,
                 clock: Callable[[], datetime] = utc_now,
                 revocations: GrantRevocationSource | None = None,
                 chains: DelegationChainResolver | None = None,
                 ceiling: HostCeiling | None = None,
                 policies: PolicySource | None = None) -> None:
        self.authorizer = CapabilityAuthorizer(grants, usage, audit, clock=clock,
                                               revocations=revocations, chains=chains,
                                               ceiling=ceiling, policies=policies)
        self.audit = audit
        self.clock = clock
        self._tools = ToolRegistry(reserved=frozenset({MESSAGES_REQUEST, ESCALATE}))
        self._messaging = MessageService(authorizer=self.authorizer, audit=audit,
                                         transport=transport, router=router,
                                         message_ids=message_ids, clock=clock)

    def _now(self) -> str:
        return format_timestamp(self.clock())

    def register_tool(self, definition: ToolDefinition, handler: ToolHandler, *,
                      resolve: RequirementResolver | None = None) -> None:
        """Register a host tool.

        Args:
            definition: the catalogue entry; its ``requiredCapability`` is the fixed
                requirement of every call or, with ``resolve``, the ceiling.
            handler: runs an authorized call.
            resolve: derives each call's exact requirement from its arguments
                (e.g. :func:`~sharedos_redis.kernel.requirements.path_argument`).

        Raises:
            ConfigurationError: the name is taken or is the reserved ``messages.request``.
        """
        self._tools.register(definition, handler, resolve)

    @_one_grant_set
    async def list_tools(self, context: AccessContext) -> list[ToolDefinition]:
        """The tools usable in ``context``; checks without consuming any use.

        ``messages.request`` is listed only when a transport and a router are
        configured, ``messages`` is enabled and some grant reaches
        ``sharedos.messaging``/send.
        """
        enabled = set(context.enabled_tool_namespaces)
        tools: list[ToolDefinition] = []
        for entry in self._tools.entries():
            if entry.definition.namespace not in enabled:
                continue
            if (await self._visible(context, entry, None, count_uses=True)).allowed:
                tools.append(entry.definition)
        if await self._messaging.request_unavailable(context) is None:
            tools.append(MESSAGES_REQUEST_TOOL)
        if ESCALATE_TOOL_NAMESPACE in enabled:
            tools.append(ESCALATE_TOOL)  # grants nothing; a running turn handles the call
        await record_outcome(self.audit, audit_event(
            context, "tool.catalog.listed", "succeeded", at=self._now(),
            metadata={"count": len(tools)}))
        return tools

    @_one_grant_set
    async def invoke_tool(self, context: AccessContext, call: ToolCall | Mapping[str, Any], *,
                          within_turn: bool = False) -> ToolResult:
        """Invoke one tool call in ``context``; refusals and failures are results.

        Args:
            context: the trusted context (inside a turn, ``now`` is its admission).
            call: the call.
            within_turn: the call comes from a running turn: its ``requestedAt``
                must lie between the turn's admission and now (else ``stale_request``).

        Raises:
            ContractError: ``call`` is a mapping that is not a valid ToolCall.
        """
        if not isinstance(call, ToolCall):
            call = ToolCall.from_wire(call)
        if call.trace_id != context.trace_id:
            outcome = ToolOutcome(tool_denied(call, self._now(), "trace_mismatch"))
        elif within_turn and self._stale(context, call):
            outcome = ToolOutcome(tool_denied(call, self._now(), "stale_request"))
        elif call.tool == MESSAGES_REQUEST:
            outcome = await self._messaging.request(context, call)
        elif call.tool == ESCALATE:  # only a running turn can end itself escalated
            outcome = ToolOutcome(tool_denied(call, self._now(), "tool_unavailable"),
                                  cause="turn_only")
        else:
            outcome = await self._invoke_registered(context, call)
        await self._audit_invoked(context, call, outcome)
        return outcome.result

    def _stale(self, context: AccessContext, call: ToolCall) -> bool:
        """Outside [admission, operation instant] (SharedOS ADR 0020, turn-scoped)."""
        requested = timestamp_ms(call.requested_at)
        return not timestamp_ms(context.now) <= requested <= timestamp_ms(self._now())

    async def _visible(self, context: AccessContext, entry: RegisteredTool,
                       operation_id: str | None, *, count_uses: bool) -> AuthorizationDecision:
        """Discovery of one tool: its fixed requirement, or some call inside its ceiling."""
        requirement = entry.definition.required_capability
        if entry.resolve is None:
            return await self.authorizer.check(context, requirement, operation_id=operation_id)
        return await self.authorizer.reach(context, requirement, operation_id=operation_id,
                                           count_uses=count_uses)

    async def _invoke_registered(self, context: AccessContext, call: ToolCall) -> ToolOutcome:
        entry = self._tools.get(call.tool)
        if entry is None:
            return ToolOutcome(tool_denied(call, self._now(), "tool_unavailable"),
                               cause="not_registered")
        if entry.definition.namespace not in context.enabled_tool_namespaces:
            return ToolOutcome(tool_denied(call, self._now(), "tool_unavailable"),
                               cause="namespace_disabled")
        # A resolving tool stays visible while a grant reaches its ceiling, even an
        # exhausted one, so the exact decision can say grant_exhausted.
        visible = await self._visible(context, entry, call.id, count_uses=False)
        if not visible.allowed:  # hidden like an unregistered tool, unless infrastructure failed
            code = visible.reason_code
            if code in _INFRASTRUCTURE:
                return ToolOutcome(tool_denied(call, self._now(), code))
            return ToolOutcome(tool_denied(call, self._now(), "tool_unavailable"), cause=code)
        requirement = self._requirement(context, call, entry)
        if isinstance(requirement, str):
            return ToolOutcome(tool_failed(call, self._now(), requirement))
        decision = await self.authorizer.consume(context, requirement, operation_id=call.id)
        if not decision.allowed:
            return ToolOutcome(tool_denied(call, self._now(), decision.reason_code))
        return await self._run_handler(context, call, entry)

    @staticmethod
    def _requirement(context: AccessContext, call: ToolCall,
                     entry: RegisteredTool) -> CapabilityRequirement | str:
        ceiling = entry.definition.required_capability
        if entry.resolve is None:
            return ceiling
        return resolve_call_requirement(entry.resolve, context, call, ceiling)

    async def _run_handler(self, context: AccessContext, call: ToolCall,
                           entry: RegisteredTool) -> ToolOutcome:
        try:
            output: object = await entry.handler(context, call)
        except Exception as exc:  # the text never reaches the caller; cancellation propagates
            return ToolOutcome(tool_failed(call, self._now(), "tool_failed"),
                               cause=type(exc).__name__)
        result = checked_tool_result(call, self._now(), output)
        if result is None:
            return ToolOutcome(tool_failed(call, self._now(), "invalid_tool_result"))
        return ToolOutcome(result)

    async def _audit_invoked(self, context: AccessContext, call: ToolCall,
                             outcome: ToolOutcome) -> None:
        result = outcome.result
        error = getattr(result, "error", None)
        await record_outcome(self.audit, audit_event(
            context, "tool.invoked", result.status, at=self._now(), tool=call.tool,
            operation_id=call.id, reason=error.code if error is not None else None,
            cause=outcome.cause, message_id=outcome.message_id, receiver=outcome.receiver))

    @_one_grant_set
    async def send_message(self, context: AccessContext,
                           envelope: MessageEnvelope | Mapping[str, Any]) -> MessageDeliveryResult:
        """Deliver a host-authored envelope (SPEC §3 send_message).

        The sender must be the context's actor and purpose/traceId the
        context's (else ``denied`` ``message_context_mismatch``); the send
        requirement is consumed once. A ``denied`` receipt is never upgraded.

        Raises:
            ContractError: the envelope is malformed (nothing audited or delivered).
        """
        return await self._messaging.send(context, envelope)

    @_one_grant_set
    async def admit_turn(self, context: AccessContext,
                         agent: AgentAddress) -> AuthorizationDecision:
        """Consume ``sharedos.execution``/invoke on ``["agent", id]`` for a turn of ``agent``."""
        try:
            requirement = invoke_requirement(context, agent)
        except ContractError:
            return AuthorizationDecision(allowed=False, reason_code="invalid_request")
        return await self.authorizer.consume(context, requirement)
