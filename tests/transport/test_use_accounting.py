"""Exact use accounting on Redis (ADR 0029): refusals before admission give the use back.

The attacker's side of the issue: two oversize requests used to exhaust a
``maxUses=2`` grant. Runs on fakeredis and on real Redis (REDIS_URL).
"""

from __future__ import annotations

from typing import Any

import pytest
from redis.asyncio import Redis

from sharedos_redis.errors import StoreUnavailable
from sharedos_redis.kernel.contracts import (
    CapabilityGrant,
    ToolCall,
    agent,
    format_timestamp,
)
from sharedos_redis.kernel.kernel import Kernel
from sharedos_redis.kernel.testing import InMemoryRouter
from sharedos_redis.store.audit import RedisAuditSink
from sharedos_redis.store.budget import TraceBudget
from sharedos_redis.store.grants import RedisGrantStore
from sharedos_redis.store.usage import RedisGrantUsageStore
from sharedos_redis.transport import RedisStreamTransport, TransportSettings

from ..support import make_context

pytestmark = [pytest.mark.anyio, pytest.mark.usefixtures("served")]  # no worker runs



def _send_grant(ns: str, max_uses: int) -> CapabilityGrant:
    return CapabilityGrant.from_wire({
        "id": "g-send", "namespaceId": ns, "subject": agent("bob").to_wire(),
        "issuer": agent("host").to_wire(),
        "capabilities": [{"resource": {"namespace": "sharedos.messaging",
                                       "path": ["agent", "alice"]},
                          "actions": ["send"], "scope": "exact"}],
        "constraints": {"maxUses": max_uses}, "issuedAt": "2026-01-01T00:00:00Z"})


async def _kernel(redis: Redis, ns: str, max_uses: int,
                  transport: RedisStreamTransport | None = None) -> Kernel:
    grants = RedisGrantStore(redis)
    await grants.put(_send_grant(ns, max_uses))
    transport = transport or RedisStreamTransport(redis, settings=TransportSettings(
        max_payload_bytes=64, default_budget_hops=3))
    return Kernel(grants=grants, usage=RedisGrantUsageStore(redis), audit=RedisAuditSink(redis),
                  transport=transport, router=InMemoryRouter(payload="ok"))


class LostReply(RedisStreamTransport):
    """A transport whose accept script's reply is lost (it may or may not have run)."""

    async def _accept(self, *args: Any, **kwargs: Any) -> Any:
        raise StoreUnavailable("accept_request", "the reply was lost")


def _ask(payload: Any, n: int, trace: str = "trace-1") -> ToolCall:
    return ToolCall.from_wire({
        "id": f"call-{n}", "tool": "messages.request", "traceId": trace,
        "requestedAt": format_timestamp(),
        "arguments": {"recipient": {"kind": "agent", "agentId": "alice"}, "payload": payload}})


async def test_oversize_requests_do_not_spend_a_bounded_grant(
        redis: Redis, ns: str, cleanup: None) -> None:
    kernel = await _kernel(redis, ns, max_uses=2)
    ctx = make_context(ns)
    codes = []
    for n, payload in enumerate(["x" * 500, "y" * 500, "ok", "ok", "ok"]):
        result = await kernel.invoke_tool(ctx, _ask(payload, n))
        codes.append(result.status if result.status == "succeeded"
                     else result.error.details.get("code") if result.error.details
                     else result.error.code)
    assert codes == ["payload_too_large", "payload_too_large", "succeeded", "succeeded",
                     "tool_unavailable"]
    assert await RedisGrantUsageStore(redis).used(ns, "g-send") == 2
    events = [e for _, e in await RedisAuditSink(redis).read(ns)]
    released = [e for e in events if e.type == "grant.usage.released"]
    assert [(e.reason, e.grant_id) for e in released] == [
        ("payload_too_large", "g-send"), ("payload_too_large", "g-send")]
    reserved = [e for e in events if e.type == "authorization.checked"
                and (e.metadata or {}).get("usageState") == "reserved"]
    assert len(reserved) == 4  # every consuming decision reserved; two were given back


async def test_an_exhausted_trace_budget_gives_the_use_back_in_the_accept_script(
        redis: Redis, ns: str, cleanup: None) -> None:
    kernel = await _kernel(redis, ns, max_uses=5)
    await TraceBudget(redis).set(ns, "trace-1", 1)
    ctx = make_context(ns)
    first = await kernel.invoke_tool(ctx, _ask("ok", 1))
    second = await kernel.invoke_tool(ctx, _ask("ok", 2))
    assert first.status == "succeeded"
    assert second.status == "failed" and second.error.details == {
        "status": "denied", "code": "budget_exhausted"}
    assert await RedisGrantUsageStore(redis).used(ns, "g-send") == 1
    events = [e for _, e in await RedisAuditSink(redis).read(ns)]
    assert [e.reason for e in events if e.type == "grant.usage.released"] == [
        "budget_exhausted"]


async def test_a_store_failure_during_accept_keeps_the_use_spent(
        redis: Redis, ns: str, cleanup: None) -> None:
    kernel = await _kernel(redis, ns, max_uses=2, transport=LostReply(redis))
    ctx = make_context(ns)
    result = await kernel.invoke_tool(ctx, _ask("ok", 1))
    assert result.status == "failed" and result.error.details == {
        "status": "failed", "code": "message_delivery_failed"}
    # the accept may have happened: the use is never refunded automatically
    assert await RedisGrantUsageStore(redis).used(ns, "g-send") == 1
