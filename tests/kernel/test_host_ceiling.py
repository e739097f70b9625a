"""The host ceiling (SharedOS ADR 0020): it can only narrow, and a broken one fails closed."""

from __future__ import annotations

from typing import Any

import pytest

from sharedos_redis.kernel.contracts import (
    AccessContext,
    AuthorizationDecision,
    CapabilityRequirement,
    JsonValue,
)
from sharedos_redis.kernel.kernel import Kernel
from sharedos_redis.kernel.memory import (
    InMemoryAuditSink,
    InMemoryGrantSource,
    InMemoryGrantUsageStore,
)
from sharedos_redis.kernel.turn import RuntimeHost, TurnExecutor, TurnRequest
from tests.kernel.kernel_world import (
    ALICE,
    NS,
    T0,
    context,
    file_tool,
    grant,
    invoke_grant,
    tool_call,
)
from tests.kernel.test_turn import execution

pytestmark = pytest.mark.anyio

READ = grant("g-read", ALICE, "files", ["reports"], ["read"], max_uses=5)


class Ceiling:
    """Denies ``files``; counts what it is shown. ``answer`` overrides its verdict."""

    def __init__(self, answer: Any = None, raises: bool = False) -> None:
        self.shown: list[AuthorizationDecision] = []
        self.loads = 0
        self.answer, self.raises = answer, raises

    async def load(self, context: AccessContext) -> object:
        self.loads += 1
        return {"deny": "files"}

    def narrow(self, decision: AuthorizationDecision, requirement: CapabilityRequirement,
               context: AccessContext, policy: object) -> Any:
        self.shown.append(decision)
        if self.raises:
            raise RuntimeError("policy engine down")
        if self.answer is not None:
            return self.answer(decision)
        if isinstance(policy, dict) and requirement.resource.namespace == policy["deny"]:
            return AuthorizationDecision(allowed=False, reason_code="no")
        return decision


def kernel(ceiling: Ceiling) -> tuple[Kernel, InMemoryAuditSink, InMemoryGrantUsageStore]:
    audit, usage = InMemoryAuditSink(), InMemoryGrantUsageStore()
    built = Kernel(grants=InMemoryGrantSource([READ, invoke_grant("g-turn", ALICE)]),
                   audit=audit, usage=usage, clock=lambda: T0, ceiling=ceiling,
                   policies=ceiling)

    async def handler(ctx: AccessContext, call: Any) -> JsonValue:
        return "read"

    built.register_tool(file_tool(), handler)
    return built, audit, usage


async def test_the_ceiling_denies_and_the_tool_leaves_the_catalogue() -> None:
    ceiling = Ceiling()
    built, audit, usage = kernel(ceiling)
    ctx = context(ALICE)
    assert [t.name for t in await built.list_tools(ctx)] == []  # refused at invocation ⇒ absent
    denied = await built.authorizer.consume(ctx, file_tool().required_capability)
    assert (denied.allowed, denied.reason_code) == (False, "host_policy_denied")
    assert await usage.used(NS, "g-read") == 0  # decided before any use is reserved
    record = [e for e in audit.events if e.type == "authorization.checked"][-1]
    assert (record.reason, record.grant_id, record.cause) == (
        "host_policy_denied", "g-read", "host_ceiling")


async def test_the_ceiling_never_sees_a_denial() -> None:
    ceiling = Ceiling(answer=lambda d: AuthorizationDecision(allowed=True, reason_code="allowed",
                                                             matched_grant_id="g-read"))
    built, _, _ = kernel(ceiling)
    other = CapabilityRequirement.from_wire({
        "resource": {"namespace": "vault", "path": ["keys"]}, "action": "read"})
    decision = await built.authorizer.consume(context(ALICE), other)
    assert decision.reason_code == "no_matching_grant" and ceiling.shown == []


@pytest.mark.parametrize("answer", [
    lambda d: AuthorizationDecision(allowed=True, reason_code="allowed",
                                    matched_grant_id="g-other"),  # widening to another grant
    lambda d: AuthorizationDecision(allowed=True, reason_code="allowed"),
    lambda d: {"allowed": True},
    lambda d: None,
])
async def test_a_ceiling_that_tries_to_widen_or_answers_garbage_fails_closed(answer: Any) -> None:
    built, audit, usage = kernel(Ceiling(answer=lambda d: answer(d) or "garbage"))
    decision = await built.authorizer.consume(context(ALICE), file_tool().required_capability)
    assert decision.reason_code == "host_policy_unavailable"
    record = [e for e in audit.events if e.type == "authorization.checked"][-1]
    assert record.fail_closed is True and await usage.used(NS, "g-read") == 0


async def test_a_ceiling_that_raises_or_an_async_one_fails_closed() -> None:
    built, _, _ = kernel(Ceiling(raises=True))
    decision = await built.authorizer.consume(context(ALICE), file_tool().required_capability)
    assert decision.reason_code == "host_policy_unavailable"

    class AsyncCeiling(Ceiling):
        async def narrow(self, *args: Any) -> Any:  # type: ignore[override]
            return args[0]

    built, _, _ = kernel(AsyncCeiling())
    decision = await built.authorizer.consume(context(ALICE), file_tool().required_capability)
    assert decision.reason_code == "host_policy_unavailable"


async def test_policy_is_loaded_once_per_turn() -> None:
    ceiling = Ceiling(answer=lambda d: d)
    built, _, _ = kernel(ceiling)

    class Runtime:
        async def run(self, turn: TurnRequest, host: RuntimeHost) -> JsonValue:
            return [(await host.call("files.read", {})).status for _ in range(3)]

    result = await TurnExecutor(built, Runtime()).execute(execution())
    assert result.status == "succeeded" and result.output == ["succeeded"] * 3
    assert ceiling.loads == 1 and len(ceiling.shown) >= 4  # admission, catalogue, 3 calls
    direct = await built.invoke_tool(context(ALICE), tool_call("files.read", {}))
    assert direct.status == "succeeded" and ceiling.loads == 2  # a bare call is its own turn
