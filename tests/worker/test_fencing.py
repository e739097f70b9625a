"""Fenced host tool calls, the tool call scope handlers read, and the lease watchdog.

A host tool handler runs only while the calling attempt holds the turn lease; a stale
attempt's call fails ``turn_lease_lost`` (audited) and the handler never runs. Inside a
handler :func:`current_call` gives a per-call idempotency key that is the same in every
attempt, the attempt (fencing token) and the attempt's own turn id. On fakeredis and
real Redis."""

from __future__ import annotations

import logging
import time

import anyio
import pytest
from redis.asyncio import Redis

from sharedos_redis.kernel.contracts import (
    AccessContext,
    JsonValue,
    MessageEnvelope,
    ToolCall,
    ToolDenied,
    ToolFailed,
    agent,
    format_timestamp,
)
from sharedos_redis.kernel.turn import RuntimeHost, TurnRequest
from sharedos_redis.store.audit import RedisAuditSink
from sharedos_redis.store.keys import Keys
from sharedos_redis.transport.turn_scope import TurnScope, tool_key, turn_scope
from sharedos_redis.worker import ToolCallScope, current_call
from sharedos_redis.worker.host import MessagingHost
from sharedos_redis.worker.local import LocalWorker
from sharedos_redis.worker.turns import TurnRunner

from .helpers import answer, ask, grant, invoke_grant, make_host, put, send_grant
from .helpers import tool as make_tool

pytestmark = pytest.mark.anyio



class Payments:
    """A tool handler with a side effect; records the call scope each run saw."""

    def __init__(self) -> None:
        self.seen: list[ToolCallScope | None] = []

    async def __call__(self, context: AccessContext, call: ToolCall) -> JsonValue:
        self.seen.append(current_call())
        return {"paid": True}


async def _host(redis: Redis, ns: str) -> tuple[MessagingHost, Payments]:
    host = make_host(redis, ns, {"alice": answer(None)}, tool_namespaces=("files",))
    pay = Payments()
    write = make_tool("files.pay", "files", ("alice",), action="write").model_copy(
        update={"read_write": "write"})
    host.register_tool(write, pay)
    await put(host, grant(ns, "alice", "files", ("alice",), "write"))
    return host, pay


async def _call(host: MessagingHost, call_id: str = "c-1") -> str:
    """Call files.pay as alice; its result's status, or its error code when not succeeded."""
    context = host.context_for("alice", purpose="billing", trace_id="t-1")
    call = ToolCall(id=call_id, tool="files.pay", arguments={}, trace_id="t-1",
                    requested_at=format_timestamp())
    result = await host.kernel.invoke_tool(context, call)
    return result.error.code if isinstance(result, ToolFailed | ToolDenied) else result.status


async def test_a_stale_attempts_tool_call_is_refused_and_audited_the_handler_never_runs(
        redis: Redis, ns: str, cleanup: None) -> None:
    host, pay = await _host(redis, ns)
    # attempt 2 runs request m-1 (attempt 1's loop was blocked past its lease)
    await redis.hset(Keys(ns).message("m-1"), mapping={"state": "running", "attempts": "2"})
    stale = TurnScope(ns, "m-1", attempt=1)
    with turn_scope(stale):
        assert await _call(host) == "turn_lease_lost"
    assert pay.seen == []
    [record] = [e for _, e in await RedisAuditSink(redis).read(ns) if e.type == "tool.invoked"]
    assert (record.outcome, record.reason, record.tool) == ("failed", "turn_lease_lost",
                                                           "files.pay")

    live = TurnScope(ns, "m-1", attempt=2)
    with turn_scope(live):
        assert await _call(host) == "succeeded"
        assert await _call(host, "c-2") == "succeeded"
    first, second = pay.seen
    # the k-th call of a tool has the same key in every attempt (the stale one's 1st too)
    assert first == ToolCallScope(idempotency_key=tool_key("m-1", "files.pay", 1), attempt=2,
                                  turn_id=live.turn_id, request_id="m-1")
    assert second is not None and second.idempotency_key == tool_key("m-1", "files.pay", 2)
    assert live.turn_id != stale.turn_id
    assert current_call() is None  # only inside a handler

    await redis.hset(Keys(ns).message("m-1"), "state", "replied")  # ended: no attempt holds it
    with turn_scope(TurnScope(ns, "m-1", attempt=2)):
        assert await _call(host) == "turn_lease_lost"
    assert len(pay.seen) == 2


async def test_outside_a_worker_turn_a_call_is_not_fenced_and_keyed_by_its_id(
        redis: Redis, ns: str, cleanup: None) -> None:
    host, pay = await _host(redis, ns)
    assert await _call(host, "c-9") == "succeeded"
    assert pay.seen == [ToolCallScope(idempotency_key="c-9")]


async def test_the_watchdog_warns_when_renewal_wakes_late_and_the_turn_goes_on(
        redis: Redis, ns: str, cleanup: None, caplog: pytest.LogCaptureFixture) -> None:
    warned = anyio.Event()

    class Watch(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            if "late" in record.getMessage():
                warned.set()

    async def alice(turn: TurnRequest, host: RuntimeHost) -> JsonValue:
        time.sleep(1.0)  # noqa: ASYNC251  # blocking code in a runtime: no lease renewal
        await warned.wait()  # the next renewal noticed; nobody else took the turn
        return {"attempt": turn.attempt}

    lease_s = 0.6
    host = make_host(redis, ns, {"bob": ask("alice", {}), "alice": alice}, lease_s=lease_s,
                     reconcile_interval_s=30)  # no reconciler pass inside the window
    await put(host, send_grant(ns, "bob", "alice"), invoke_grant(ns, "bob"),
              invoke_grant(ns, "alice"))
    watch = Watch(logging.WARNING)
    logger = logging.getLogger("sharedos_redis.worker")
    logger.addHandler(watch)
    try:
        async with host, LocalWorker(host):
            with anyio.fail_after(15):
                result = await host.start_turn("bob", {}, purpose="atlas-status")
    finally:
        logger.removeHandler(watch)
    assert result.status == "succeeded", result
    assert result.output["output"] == {"attempt": 1}  # type: ignore[index]
    [late] = [r for r in caplog.records if "woke" in r.getMessage()]
    message = late.getMessage()
    assert late.levelno == logging.WARNING and "attempt 1" in message and ns in message
    assert "the lease may have expired" in message
    assert late.lease_late["late_s"] >= 1.0 - lease_s / 3  # type: ignore[attr-defined]


@pytest.mark.usefixtures("served")  # no worker runs: a TurnRunner alone
async def test_a_late_renewal_that_finds_another_attempt_stops_the_turn(
        redis: Redis, ns: str, cleanup: None, caplog: pytest.LogCaptureFixture) -> None:
    async def alice(turn: TurnRequest, host: RuntimeHost) -> JsonValue:
        # another worker re-claims the request meanwhile (attempt 2) ...
        await redis.hset(Keys(ns).message(turn.message.id), "attempts", "2")
        time.sleep(1.0)  # noqa: ASYNC251  # ... while this one blocks its loop past the lease
        await anyio.Event().wait()  # only the watchdog's verdict ends this turn
        return None

    host = make_host(redis, ns, {"alice": alice, "bob": answer(None)}, lease_s=0.6)
    await put(host, invoke_grant(ns, "alice"))
    context = host.context_for("bob", purpose="p", trace_id=f"t-{ns}")
    request = MessageEnvelope(id=f"m-{ns}", sender=agent("bob"), receiver=agent("alice"),
                              purpose="p", payload={}, trace_id=context.trace_id,
                              created_at=format_timestamp())
    assert (await host.transport.deliver(context, request)).status == "accepted"
    with anyio.fail_after(10):
        outcome = await TurnRunner(host, worker="w1").run(ns, request.id)
    assert outcome == "lease_lost"
    messages = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert any("attempt 1: lease renewal woke" in m and "may have expired" in m
               for m in messages), messages
    assert any("attempt 1 lost its lease to another attempt" in m for m in messages), messages
    assert await redis.xlen(Keys(ns).settled) == 0  # nothing settled by the stale attempt
    assert await redis.hget(Keys(ns).message(request.id), "state") == b"running"
