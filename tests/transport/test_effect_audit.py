"""The send decision's record is written inside the accept script (ADR 0029 outbox):
one round trip, atomic with the accept or its refusal; never lost when no script runs.
An accepted request's ``message.sent`` rides the same script.

Runs on fakeredis and on real Redis (REDIS_URL).
"""

from __future__ import annotations

import pytest
from redis.asyncio import Redis

from sharedos_redis.kernel.contracts import AuditEvent, agent
from sharedos_redis.store.audit import RedisAuditSink
from sharedos_redis.store.budget import TraceBudget

from ..support import make_context
from .test_use_accounting import LostReply, _ask, _kernel

pytestmark = [pytest.mark.anyio, pytest.mark.usefixtures("served")]  # no worker runs


class _Counted(RedisAuditSink):
    """Counts the records written outside scripts (no behaviour change)."""

    def __init__(self, redis: Redis) -> None:
        super().__init__(redis)
        self.written: list[str] = []

    async def record(self, event: AuditEvent) -> None:
        self.written.append(event.type)
        await super().record(event)


async def _types(redis: Redis, ns: str) -> list[str]:
    return [e.type for _, e in await RedisAuditSink(redis).read(ns)]


async def test_the_decision_record_is_written_by_the_accept_script(
        redis: Redis, ns: str, cleanup: None) -> None:
    kernel = await _kernel(redis, ns, max_uses=5)
    sink = _Counted(redis)
    kernel.authorizer._audit = kernel._messaging._audit = sink  # their own writes, counted
    result = await kernel.invoke_tool(make_context(ns), _ask("ok", 1))
    assert result.status == "succeeded"
    # neither the decision nor the send has a round trip of its own
    assert "authorization.checked" not in sink.written
    assert "message.sent" not in sink.written
    types = await _types(redis, ns)
    at = types.index("authorization.checked")
    assert types[at:at + 3] == ["authorization.checked", "message.accepted", "message.sent"]
    sent = [e for _, e in await RedisAuditSink(redis).read(ns) if e.type == "message.sent"]
    assert [(e.outcome, e.action, e.receiver, e.reason) for e in sent] == [
        ("succeeded", "send", agent("alice"), None)]


async def test_a_refusal_in_the_script_still_records_the_decision_first(
        redis: Redis, ns: str, cleanup: None) -> None:
    kernel = await _kernel(redis, ns, max_uses=5)
    await TraceBudget(redis).set(ns, "trace-1", 0)
    result = await kernel.invoke_tool(make_context(ns), _ask("ok", 1))
    assert result.status == "failed"
    assert (await _types(redis, ns))[:4] == [
        "authorization.checked", "grant.usage.released", "message.refused", "message.sent"]


async def test_a_refusal_before_the_script_records_the_decision_before_the_release(
        redis: Redis, ns: str, cleanup: None) -> None:
    kernel = await _kernel(redis, ns, max_uses=5)
    result = await kernel.invoke_tool(make_context(ns), _ask("x" * 500, 1))
    assert result.status == "failed"
    assert (await _types(redis, ns))[:3] == [
        "authorization.checked", "grant.usage.released", "message.sent"]


async def test_a_failed_accept_still_records_the_decision(
        redis: Redis, ns: str, cleanup: None) -> None:
    kernel = await _kernel(redis, ns, max_uses=2, transport=LostReply(redis))
    result = await kernel.invoke_tool(make_context(ns), _ask("ok", 1))
    assert result.status == "failed"
    types = await _types(redis, ns)
    assert types[:2] == ["authorization.checked", "message.sent"]
