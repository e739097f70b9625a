"""A re-run turn's nested requests re-attach (issue 12): through the kernel, the transport
and the router of one host, with the turn's attempts driven by hand.

alice answers bob's request; her turn asks carol. Attempt 1 makes the call and stops
(its lease is taken over); attempt 2 makes the same call and re-attaches to the same
request, waits, and gets carol's reply; attempt 3 gets the stored reply at once; a changed
call is a ``replay_conflict``; the stale attempt 1 is fenced (``turn_lease_lost``). One
accept, one hop and one ``maxUses`` use for the edge alice → carol throughout.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Awaitable, Callable
from typing import Any

import anyio
import pytest
from redis.asyncio import Redis

from sharedos_redis.kernel.contracts import (
    AuditEvent,
    JsonValue,
    MessageEnvelope,
    ToolCall,
    ToolResult,
    agent,
    format_timestamp,
)
from sharedos_redis.kernel.ids import new_id
from sharedos_redis.store.keys import Keys
from sharedos_redis.store.markers import MarkerStore
from sharedos_redis.transport.turn_scope import TurnScope, child_id, turn_scope
from sharedos_redis.worker.host import MessagingHost

from ..support import Keyspace, eventually, now_ms
from .helpers import answer, make_host

pytestmark = [pytest.mark.anyio, pytest.mark.usefixtures("served")]  # no worker runs

PURPOSE, TRACE = "replay-test", "trace-replay"


def _ask(payload: JsonValue) -> ToolCall:
    return ToolCall.from_wire({
        "id": f"call-{new_id()}", "tool": "messages.request", "traceId": TRACE,
        "requestedAt": format_timestamp(),
        "arguments": {"recipient": {"kind": "agent", "agentId": "carol"}, "payload": payload}})


async def _as_attempt(host: MessagingHost, scope: TurnScope, payload: JsonValue) -> ToolResult:
    """alice's next ``messages.request`` to carol, made by the attempt ``scope``."""
    with turn_scope(scope):
        return await host.kernel.invoke_tool(
            host.context_for("alice", purpose=PURPOSE, trace_id=TRACE), _ask(payload))


async def _claim(redis: Redis, ns: str, root: str, ahead_ms: int) -> int:
    """Take alice's turn over as the next attempt (the clock ``ahead_ms`` on: the lease is
    past)."""
    later = MarkerStore(redis, clock_ms=lambda: now_ms() + ahead_ms)
    claim = await later.claim_turn(ns, root, lease_ms=60_000, max_attempts=9, worker="w")
    assert claim.outcome == "claimed"
    return claim.attempt


def _waiting(host: MessagingHost, message_id: str) -> Callable[[], Awaitable[bool]]:
    """Whether a waiter of ``message_id`` is in its wait (watched, no longer only armed);
    reads the listener's private state: no public signal says a waiter waits."""
    listener = host.router._listener
    assert listener is not None
    key = (host.namespace, message_id)

    async def check() -> bool:
        return key in listener._slots and key not in listener._armed

    return check


async def _events(host: MessagingHost) -> list[AuditEvent]:
    return [event for _, event in await host.audit.read(host.namespace)]


async def test_a_re_run_turn_re_attaches_to_its_nested_request(
        redis: Redis, ns: str, keyspace: Keyspace) -> None:
    host = make_host(redis, ns, {name: answer(None) for name in ("bob", "alice", "carol")})
    await host.allow_turns("alice", "carol")
    await host.allow_requests("bob", "alice")
    edge = await host.allow_requests("alice", "carol", max_uses=5)
    keys = Keys(ns)
    async with host:
        root = MessageEnvelope(id=new_id(), sender=agent("bob"), receiver=agent("alice"),
                               purpose=PURPOSE, payload={"q": 1}, trace_id=TRACE,
                               created_at=format_timestamp())
        bob = host.context_for("bob", purpose=PURPOSE, trace_id=TRACE)
        assert (await host.kernel.send_message(bob, root)).status == "accepted"
        child = child_id(root.id, 1)
        attempt1 = TurnScope(ns, root.id, await _claim(redis, ns, root.id, 0))
        results: dict[str, ToolResult] = {}

        async def run(name: str, scope: TurnScope, payload: JsonValue) -> None:
            results[name] = await _as_attempt(host, scope, payload)

        with anyio.fail_after(20):
            async with anyio.create_task_group() as tg:
                tg.start_soon(run, "first", attempt1, {"n": 1})

                await eventually(_waiting(host, child))
                # attempt 1 stops after its accept; attempt 2 holds the turn now
                attempt2 = TurnScope(ns, root.id, await _claim(redis, ns, root.id, 3_600_000))
                tg.cancel_scope.cancel()
            assert "first" not in results
            # the stopped attempt did not cancel the request: it is attempt 2's now
            assert await redis.hget(keys.message(child), "state") == b"accepted"

            async with anyio.create_task_group() as tg:
                tg.start_soon(run, "second", attempt2, {"n": 1})
                await eventually(_waiting(host, child))  # re-attached, it waits for carol
                reply = MessageEnvelope(
                    id=new_id(), sender=agent("carol"), receiver=agent("alice"),
                    purpose=PURPOSE, payload={"answer": 42}, trace_id=TRACE, reply_to=child,
                    created_at=format_timestamp())
                assert (await host.router.settle_reply(ns, reply)).settled

            attempt3 = TurnScope(ns, root.id, await _claim(redis, ns, root.id, 7_200_000))
            with anyio.fail_after(2):  # the stored reply, at once (not at the deadline)
                settled = await _as_attempt(host, attempt3, {"n": 1})
            attempt4 = TurnScope(ns, root.id, await _claim(redis, ns, root.id, 10_800_000))
            changed = await _as_attempt(host, attempt4, {"n": 2})
            stale = await _as_attempt(host, attempt1, {"n": 3})  # attempt 1's next call

        for result in (results["second"], settled):
            assert (result.status, result.output) == ("succeeded", {"answer": 42})
            assert result.metadata is not None and result.metadata["messageId"] == child
        for result, code in ((changed, "replay_conflict"), (stale, "turn_lease_lost")):
            wire: dict[str, Any] = result.to_wire()
            assert wire["error"]["code"] == "message_request_not_accepted"
            assert wire["error"]["details"]["code"] == code
        assert not await redis.exists(keys.message(child_id(root.id, 2)))

        # one accept, one hop and one use for the edge alice -> carol
        events = await _events(host)
        about_child = Counter(e.type for e in events if e.message_id == child)
        assert about_child["message.accepted"] == 1
        assert about_child["message.replayed"] == 2
        assert about_child["message.refused"] == 1  # the changed call
        assert await host.budget.get(ns, TRACE) == host.settings.default_budget_hops - 2
        assert await redis.hget(keys.usage, edge.id) == b"1"
        released = [e.reason for e in events if e.type == "grant.usage.released"]
        assert sorted(released) == ["replay_attached", "replay_attached", "replay_conflict",
                                    "turn_lease_lost"]
        refused = [(e.message_id, e.reason) for e in events if e.type == "message.refused"]
        assert refused == [(child, "replay_conflict"),
                           (child_id(root.id, 2), "turn_lease_lost")]


async def test_the_attempt_holding_the_turn_still_cancels_its_nested_request(
        redis: Redis, ns: str, keyspace: Keyspace) -> None:
    """A turn that ends while it waits (timeout, drain) ends what it asked too."""
    host = make_host(redis, ns, {name: answer(None) for name in ("bob", "alice", "carol")})
    await host.allow_turns("alice", "carol")
    await host.allow_requests("bob", "alice")
    await host.allow_requests("alice", "carol")
    keys = Keys(ns)
    async with host:
        root = MessageEnvelope(id=new_id(), sender=agent("bob"), receiver=agent("alice"),
                               purpose=PURPOSE, payload={"q": 1}, trace_id=TRACE,
                               created_at=format_timestamp())
        bob = host.context_for("bob", purpose=PURPOSE, trace_id=TRACE)
        assert (await host.kernel.send_message(bob, root)).status == "accepted"
        scope = TurnScope(ns, root.id, await _claim(redis, ns, root.id, 0))
        child = child_id(root.id, 1)

        with anyio.fail_after(20):
            async with anyio.create_task_group() as tg:
                tg.start_soon(_as_attempt, host, scope, {"n": 1})
                await eventually(_waiting(host, child))
                tg.cancel_scope.cancel()
        assert await redis.hget(keys.message(child), "state") == b"cancelled"
