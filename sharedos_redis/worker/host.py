"""``MessagingHost``: the one object a user builds — agents, grants, stores, kernel.

It wires the Redis host ports (grants, usage, audit, transport, router,
markers) into one :class:`~sharedos_redis.kernel.kernel.Kernel` for one
namespace, and is the trusted source of every agent's AccessContext: actor =
the agent, authority/owner from the host's policy for that agent. The same
host object runs in the app process (``start_turn``) and in worker processes.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from types import TracebackType
from typing import Any, Self

import anyio
from anyio.abc import TaskGroup
from redis.asyncio import Redis

from ..errors import ConfigurationError, ContractError
from ..kernel.contracts import (
    AccessContext,
    Address,
    AgentAddress,
    AuditEvent,
    CapabilityGrant,
    ExecutionOptions,
    ExecutionRequest,
    ExecutionResult,
    JsonValue,
    MessageEnvelope,
    ToolDefinition,
    agent,
    checked_namespace_id,
    format_timestamp,
    service,
)
from ..kernel.ids import new_id
from ..kernel.kernel import Kernel
from ..kernel.ports import GrantSource
from ..kernel.requirements import RequirementResolver
from ..kernel.tools import ToolHandler
from ..kernel.turn import RuntimePlugin, TurnExecutor
from ..observability import telemetry
from ..router.router import RedisRequestRouter
from ..store.audit import RedisAuditSink
from ..store.budget import TraceBudget
from ..store.client import RedisSettings, create_redis
from ..store.directory import AgentDirectory
from ..store.grants import RedisGrantStore
from ..store.markers import MarkerStore
from ..store.policy import RedisHostPolicy
from ..store.usage import RedisGrantUsageStore
from ..transport.deadlines import deadline_scope
from ..transport.transport import RedisStreamTransport, TransportSettings
from ..transport.turn_scope import request_id
from .effects import EffectTrackingTransport, tracked_handler
from .fencing import fenced_handler
from .grants import invoke_grant, send_grant
from .settings import HostSettings
from .slots import SlotReleasingRouter

__all__ = ["AgentSpec", "MessagingHost", "budget_set_event", "nested_deadline_ms"]

HOST_ADDRESS = service("sharedos-redis")


def budget_set_event(namespace: str, trace_id: str, hops: int, *, actor: Address,
                     purpose: str = "loop-budget") -> AuditEvent:
    """The ``budget.set`` audit record of a host or operator setting a trace's hops."""
    return AuditEvent(
        id=new_id(), type="budget.set", outcome="succeeded", at=format_timestamp(),
        trace_id=trace_id, namespace_id=namespace, actor=actor, authority=actor, owner=actor,
        purpose=purpose, metadata={"hops": hops})


def _identifier(value: str) -> bool:
    """``value`` is a valid Identifier exactly as given (1-256 characters, no padding)."""
    return 0 < len(value) <= 256 and value == value.strip()


def nested_deadline_ms(start_ms: int, turn_timeout_ms: int) -> int:
    """The latest deadline a request made inside a turn may have.

    A turn that ends at ``start + timeout`` keeps a margin (a fifth of its time,
    0.1 to 2 s) to observe a nested request's outcome and still answer; a nested
    request may therefore never outlive the turn that waits for it.
    """
    margin = min(2000, max(100, turn_timeout_ms // 5))
    return start_ms + max(1, turn_timeout_ms - margin)


@dataclass(frozen=True)
class AgentSpec:
    """One agent the host runs: its runtime and the host's policy for it.

    Attributes:
        runtime: the agent's turn logic.
        authority: who issues this agent's grants (grants by anyone else are ignored).
        owner: on whose behalf the agent acts (the default resource owner).
        tool_namespaces: tool namespaces enabled in this agent's turns.
    """

    runtime: RuntimePlugin
    authority: Address
    owner: Address
    tool_namespaces: tuple[str, ...] = ("messages",)


@dataclass
class _Tool:
    definition: ToolDefinition
    handler: ToolHandler


@dataclass
class MessagingHost:
    """Agents, their policy and the Redis-backed kernel of one namespace.

    Args:
        redis: an asyncio Redis client (any ``decode_responses``), or use :meth:`from_url`.
        namespace: the SharedOS namespace id; all keys live under its hash tag.
        agents: agent id → :class:`AgentSpec`.
        grants: the trusted grant source (default: a :class:`RedisGrantStore` on ``redis``).
        settings: timeouts, retries and concurrency.
        connection: how workers and the CLI reach the same Redis (set by :meth:`from_url`
            and :meth:`from_settings`; a worker in another process needs it).
    """

    redis: Redis
    namespace: str
    agents: Mapping[str, AgentSpec]
    grants: GrantSource | None = None
    settings: HostSettings = field(default_factory=HostSettings)
    connection: RedisSettings | None = None
    _tools: list[_Tool] = field(default_factory=list, init=False, repr=False)
    _tg: TaskGroup | None = field(default=None, init=False, repr=False)
    # per-agent and per-catalogue values no request changes (built on first use)
    _catalogue: tuple[ToolDefinition, ...] | None = field(default=None, init=False, repr=False)
    _executors: dict[str, TurnExecutor] = field(default_factory=dict, init=False, repr=False)
    _addresses: dict[str, AgentAddress] = field(default_factory=dict, init=False, repr=False)

    def __post_init__(self) -> None:
        try:  # once, here: a padded or control-character id would split the keyspace
            self.namespace = checked_namespace_id(self.namespace)
        except ContractError as exc:
            raise ConfigurationError(f"invalid namespace {self.namespace!r}: {exc}") from None
        s = self.settings
        self.grant_store = RedisGrantStore(self.redis)
        live = chains = None  # the store's own ports serve only the grants it holds
        if self.grants is None:
            self.grants = chains = self.grant_store
            live = self.grant_store if s.live_revocation else None
        self.usage = RedisGrantUsageStore(self.redis)
        self.policy = RedisHostPolicy(self.redis)
        self.audit = RedisAuditSink(self.redis, maxlen=s.audit_maxlen, linger_s=0.002)
        self.budget = TraceBudget(self.redis, default_hops=s.default_budget_hops)
        self.transport = RedisStreamTransport(self.redis, settings=TransportSettings(
            request_timeout_s=s.request_timeout_s, default_budget_hops=s.default_budget_hops,
            retention_s=s.retention_s, audit_maxlen=s.audit_maxlen, route_check=s.route_check))
        self.markers = MarkerStore(
            self.redis, retention_s=s.retention_s, audit_maxlen=s.audit_maxlen,
            max_reply_bytes=s.max_reply_bytes or self.transport.settings.max_payload_bytes,
            audit=self.audit)
        self.router = RedisRequestRouter(self.redis, markers=self.markers)
        self.directory = AgentDirectory(self.redis)
        self.transport.watch = self.router  # waiters armed before the accept: one read less
        # the kernel reaches the transport and the tool handlers through effect counters:
        # a draining worker may hand back only turns whose effects can safely repeat
        self.kernel = Kernel(grants=self.grants, usage=self.usage, audit=self.audit,
                             transport=EffectTrackingTransport(self.transport),
                             router=SlotReleasingRouter(self.router), revocations=live,
                             message_ids=request_id,
                             chains=chains,
                             ceiling=self.policy if s.host_ceiling else None,
                             policies=self.policy if s.host_ceiling else None)
        telemetry().instrument_kernel(self.kernel)

    @classmethod
    def from_url(cls, url: str, *, namespace: str, agents: Mapping[str, AgentSpec],
                 **kwargs: Any) -> MessagingHost:
        """Build a host with its own bounded client for ``url`` (workers reuse it).

        Raises:
            ConfigurationError: the URL is invalid.
        """
        return cls.from_settings(RedisSettings.from_url(url), namespace=namespace,
                                 agents=agents, **kwargs)

    @classmethod
    def from_settings(cls, connection: RedisSettings, *, namespace: str,
                      agents: Mapping[str, AgentSpec], **kwargs: Any) -> MessagingHost:
        """Build a host whose client, workers and CLI all connect as ``connection`` says
        (TLS, ACL user, Sentinel: see :class:`RedisSettings`; ``RedisSettings.from_env()``
        reads ``SHAREDOS_REDIS_*``).

        Raises:
            ConfigurationError: the settings are invalid.
        """
        return cls(create_redis(connection), namespace=namespace, agents=agents,
                   connection=connection, **kwargs)

    def register_tool(self, definition: ToolDefinition, handler: ToolHandler, *,
                      resolve: RequirementResolver | None = None) -> None:
        """Register a tool for every agent; each call is still authorized per actor.

        With ``resolve`` each call's exact requirement derives from its arguments,
        inside the definition's ``requiredCapability`` (the ceiling); see
        :meth:`Kernel.register_tool`.

        Inside a worker turn a call runs only while the turn's attempt holds its lease
        (else it fails ``turn_lease_lost`` and the handler never runs); the handler reads
        its idempotency key and fencing token from
        :func:`~sharedos_redis.worker.current_call`.

        Raises:
            ConfigurationError: the name is taken or reserved.
        """
        # the markers are looked up per call: tests may swap the store after registration
        handler = fenced_handler(tracked_handler(definition, handler),
                                 lambda ns, mid, n: self.markers.holds_lease(ns, mid, n))
        self.kernel.register_tool(definition, handler, resolve=resolve)
        self._tools.append(_Tool(definition, handler))
        self._catalogue = None

    @property
    def tool_definitions(self) -> tuple[ToolDefinition, ...]:
        """Every registered tool, ``messages.request`` and ``sharedos.escalate`` included
        (an agent is offered the latter only with ``sharedos`` in its tool namespaces)."""
        catalogue = self._catalogue
        if catalogue is None:
            from ..kernel.escalation import ESCALATE_TOOL
            from ..kernel.messaging import MESSAGES_REQUEST_TOOL

            # validated once per registration (a definition made with model_construct
            # fails here, as it did in every ExecutionRequest built with it)
            catalogue = self._catalogue = tuple(
                ToolDefinition.__pydantic_validator__.validate_python(definition)
                for definition in (MESSAGES_REQUEST_TOOL, ESCALATE_TOOL,
                                   *(tool.definition for tool in self._tools)))
        return catalogue

    def agent_spec(self, agent_id: str) -> AgentSpec | None:
        """The host's policy for ``agent_id``, or None when the host does not run it."""
        return self.agents.get(agent_id)

    def context_for(self, agent_id: str, *, purpose: str, trace_id: str,
                    now: datetime | None = None) -> AccessContext:
        """The trusted AccessContext of a turn run by ``agent_id``.

        Raises:
            ConfigurationError: the host does not run that agent.
        """
        spec = self.agents.get(agent_id)
        if spec is None:
            raise ConfigurationError(f"host runs no agent {agent_id!r}")
        return AccessContext(
            namespace_id=self.namespace, actor=agent(agent_id), authority=spec.authority,
            owner=spec.owner, purpose=purpose, trace_id=trace_id,
            enabled_tool_namespaces=spec.tool_namespaces,
            now=format_timestamp(now or datetime.now(UTC)),
        )

    def execution_request(self, agent_id: str, message: MessageEnvelope, *,
                          execution_id: str, timeout_ms: int | None = None) -> ExecutionRequest:
        """The ExecutionRequest of ``agent_id``'s turn for ``message``.

        Its parts are validated (the context and options here, the agent address and the
        catalogue once, ``message`` wherever it was parsed or built); the request is then
        assembled without validating them all again (the catalogue alone cost more than
        the rest of a no-op turn's models). A ``message`` that did not go through
        validation (``model_construct``), or an invalid ``execution_id``, takes the
        validating constructor and fails there as before.
        """
        context = self.context_for(agent_id, purpose=message.purpose, trace_id=message.trace_id)
        options = None
        if timeout_ms is not None:
            options = ExecutionOptions(timeout_ms=max(1, min(timeout_ms, 600_000)))
        address = self._addresses.get(agent_id)
        if address is None:
            address = self._addresses[agent_id] = agent(agent_id)
        fields: dict[str, Any] = {
            "execution_id": execution_id, "agent": address, "context": context,
            "message": message, "tools": self.tool_definitions, "options": options}
        if message.is_validated and context.is_validated and _identifier(execution_id):
            return ExecutionRequest.model_construct(**fields)
        return ExecutionRequest(**fields)

    async def execute(self, agent_id: str, request: ExecutionRequest, *,
                      attempt: int = 1, turn_id: str | None = None) -> ExecutionResult:
        """Run one turn of ``agent_id`` through the kernel's TurnExecutor, as ``turn_id``
        (fresh when omitted; see :meth:`TurnExecutor.execute`).

        Requests the turn makes are capped to end before the turn does (see
        :func:`nested_deadline_ms`), so the turn sees their typed outcome instead of
        being cancelled while it waits.
        """
        runtime = self.agents[agent_id].runtime
        executor = self._executors.get(agent_id)
        if executor is None or executor.runtime is not runtime:
            # one per agent: it holds only the kernel and the agent's runtime
            executor = self._executors[agent_id] = TurnExecutor(self.kernel, runtime)
        options = request.options
        timeout_ms = options.timeout_ms if options and options.timeout_ms else 120_000
        with deadline_scope(nested_deadline_ms(int(time.time() * 1000), timeout_ms)):
            return await executor.execute(request, attempt=attempt, turn_id=turn_id)

    async def start_turn(self, agent_id: str, payload: JsonValue, *, purpose: str,
                         trace_id: str | None = None, hops: int | None = None,
                         sender: Address = HOST_ADDRESS) -> ExecutionResult:
        """Start a root turn of ``agent_id`` in this process (what a scheduler tick does).

        The host authors the message (``sender`` defaults to the host service), opens a
        new trace and sets its loop budget to ``hops`` (default: the configured hops).

        Raises:
            ConfigurationError: the host is not entered (``async with host:``), so no
                reply listener runs, or it does not run ``agent_id``.
        """
        if not self.router.running:
            raise ConfigurationError("enter the host first: `async with host:` starts the "
                                     "reply listener that requests made in turns wait on")
        trace_id = trace_id or f"trace-{uuid.uuid4().hex[:16]}"
        count = hops if hops is not None else self.settings.default_budget_hops
        if await self.budget.start(self.namespace, trace_id, count):
            await self.audit.record(budget_set_event(self.namespace, trace_id, count,
                                                     actor=HOST_ADDRESS, purpose=purpose))
        message = MessageEnvelope(
            id=new_id(), sender=sender, receiver=agent(agent_id), purpose=purpose,
            payload=payload, trace_id=trace_id, created_at=format_timestamp(),
        )
        timeout_ms = int(self.settings.turn_timeout_s * 1000)
        request = self.execution_request(agent_id, message, execution_id=message.id,
                                         timeout_ms=timeout_ms)
        hooks = telemetry()
        with hooks.turn_span(self.namespace, message, attempt=1, traceparent=None,
                             tools=request.tools) as span:
            result = await self.execute(agent_id, request)
            span.outcome(result.status)
        return result

    def _authority(self, agent_id: str) -> Address:
        spec = self.agents.get(agent_id)
        if spec is None:
            raise ConfigurationError(f"host runs no agent {agent_id!r}")
        return spec.authority

    async def allow_turns(self, *agent_ids: str, expires_in_s: float | None = None) -> None:
        """Issue each agent's grant to run its own turns (every agent needs one).

        Raises:
            ConfigurationError: the host does not run one of the agents.
            StoreUnavailable: Redis failed.
        """
        for agent_id in agent_ids:
            await self.grant_store.put(invoke_grant(
                self.namespace, agent_id, issuer=self._authority(agent_id),
                expires_in_s=expires_in_s))

    async def allow_requests(self, sender: str, recipient: str, *,
                             purposes: Sequence[str] | None = None, max_uses: int | None = None,
                             expires_in_s: float | None = None,
                             grant_id: str | None = None) -> CapabilityGrant:
        """Issue ``sender``'s grant to ``messages.request`` ``recipient`` (as the sender's
        authority), limited to ``purposes``, ``max_uses`` and ``expires_in_s`` when given.

        Raises:
            ConfigurationError: the host does not run ``sender``.
            StoreUnavailable: Redis failed.
        """
        grant = send_grant(self.namespace, sender, recipient, issuer=self._authority(sender),
                           purposes=purposes, max_uses=max_uses, expires_in_s=expires_in_s,
                           grant_id=grant_id)
        await self.grant_store.put(grant)
        return grant

    async def set_budget(self, trace_id: str, hops: int, *, actor: Address = HOST_ADDRESS) -> None:
        """Replenish (or cut) a trace's loop budget — the only way to add hops; audited.

        Raises:
            ConfigurationError: ``hops`` is negative.
            StoreUnavailable: Redis failed.
        """
        await self.budget.set(self.namespace, trace_id, hops)
        await self.audit.record(budget_set_event(self.namespace, trace_id, hops, actor=actor))

    async def __aenter__(self) -> Self:
        """Start the reply listener and the audit writer (enter and exit in one task)."""
        tg = anyio.create_task_group()
        await tg.__aenter__()
        try:
            await tg.start(self.audit.run)
            await self.router.__aenter__()
        except BaseException as exc:
            self.audit.stop()
            await tg.__aexit__(type(exc), exc, exc.__traceback__)
            raise
        self._tg = tg
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None,
                        exc: BaseException | None, tb: TracebackType | None) -> None:
        tg, self._tg = self._tg, None
        try:
            await self.router.__aexit__(exc_type, exc, tb)
        finally:
            self.audit.stop()
            if tg is not None:
                await tg.__aexit__(None, None, None)
