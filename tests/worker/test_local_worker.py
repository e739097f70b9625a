"""End to end in one process: app turn → accept → relay → recipient turn → reply → waiter.

Runs on fakeredis and on real Redis (REDIS_URL) with the in-process LocalWorker.
"""

from __future__ import annotations

import time
from typing import Any

import anyio
import pytest
from redis.asyncio import Redis

from sharedos_redis.kernel.contracts import JsonValue
from sharedos_redis.kernel.turn import RuntimeHost, TurnRequest
from sharedos_redis.worker.local import LocalWorker

from ..support import scan_keyspace
from .helpers import (
    answer,
    ask,
    grant,
    invoke_grant,
    make_host,
    put,
    read_file_handler,
    send_grant,
    tool,
)

pytestmark = pytest.mark.anyio



def output(result: Any) -> Any:
    assert result.status == "succeeded", result
    return result.output


async def test_bob_asks_alice_and_gets_her_reply(redis: Redis, ns: str, cleanup: None) -> None:
    host = make_host(redis, ns, {"bob": ask("alice", {"q": "status?"}),
                                 "alice": answer({"status": "green"})})
    await put(host, send_grant(ns, "bob", "alice"), invoke_grant(ns, "bob"),
              invoke_grant(ns, "alice"))
    async with host, LocalWorker(host):
        with anyio.fail_after(10):
            result = await host.start_turn("bob", {"tick": 1}, purpose="atlas-status")
    tool_result = output(result)
    assert tool_result["status"] == "succeeded"
    assert tool_result["output"] == {"status": "green"}
    assert await host.router.pending(ns) == []


async def test_alice_runs_as_alice_never_with_bobs_grants(redis: Redis, ns: str,
                                                           cleanup: None) -> None:
    async def alice(turn: TurnRequest, host: RuntimeHost) -> JsonValue:
        own = await host.call("files.alice", {})
        bobs = await host.call("files.bob", {})
        return {"own": own.status, "bobs": bobs.status,
                "bobs_code": bobs.error.code if bobs.status != "succeeded" else None,
                "offered": sorted(t.name for t in turn.tools)}

    host = make_host(redis, ns, {"bob": ask("alice", {"q": "files?"}), "alice": alice})
    host.register_tool(tool("files.alice", "files", ("alice",)), read_file_handler)
    host.register_tool(tool("files.bob", "files", ("bob",)), read_file_handler)
    await put(host, send_grant(ns, "bob", "alice"), invoke_grant(ns, "bob"),
              invoke_grant(ns, "alice"), grant(ns, "alice", "files", ("alice",), "read"),
              grant(ns, "bob", "files", ("bob",), "read"))
    async with host, LocalWorker(host):
        with anyio.fail_after(10):
            result = await host.start_turn("bob", {}, purpose="atlas-status")
    reply = output(result)["output"]
    assert reply["own"] == "succeeded"
    assert reply["bobs"] == "denied" and reply["bobs_code"] == "tool_unavailable"
    assert "files.bob" not in reply["offered"] and "files.alice" in reply["offered"]


async def test_missing_invoke_grant_fails_fast_with_typed_code(redis: Redis, ns: str,
                                                               cleanup: None) -> None:
    host = make_host(redis, ns, {"bob": ask("alice", {}), "alice": answer("never")},
                     request_timeout_s=30, turn_timeout_s=20)
    await put(host, send_grant(ns, "bob", "alice"), invoke_grant(ns, "bob"))
    async with host, LocalWorker(host):
        with anyio.fail_after(5):  # far below the 30 s deadline
            result = await host.start_turn("bob", {}, purpose="p")
    failed = output(result)
    assert failed["status"] == "failed"
    assert failed["error"]["code"] == "message_reply_resolution_failed"
    assert failed["error"]["details"] == {"outcome": "recipient_turn_denied"}


async def test_unknown_recipient_fails_fast(redis: Redis, ns: str, cleanup: None) -> None:
    host = make_host(redis, ns, {"bob": ask("zed", {})})
    await put(host, send_grant(ns, "bob", "zed"), invoke_grant(ns, "bob"))
    async with host, LocalWorker(host):
        with anyio.fail_after(5):
            result = await host.start_turn("bob", {}, purpose="p")
    error = output(result)["error"]  # refused at accept: nobody serves zed (ADR 0025)
    assert error["code"] == "message_request_not_accepted"
    assert error["details"] == {"status": "denied", "code": "route_unavailable"}


async def test_three_deep_chain_with_one_worker(redis: Redis, ns: str, cleanup: None) -> None:
    async def alice(turn: TurnRequest, host: RuntimeHost) -> JsonValue:
        note = await host.call("messages.request", {
            "recipient": {"kind": "agent", "agentId": "carol"}, "payload": {"q": "note?"}})
        return {"alice": "green", "carol": note.to_wire()}

    host = make_host(redis, ns, {"bob": ask("alice", {}), "alice": alice,
                                 "carol": answer({"note": "thursday"})}, max_jobs=2)
    await put(host, send_grant(ns, "bob", "alice"), send_grant(ns, "alice", "carol"),
              *(invoke_grant(ns, who) for who in ("bob", "alice", "carol")))
    async with host, LocalWorker(host):
        with anyio.fail_after(10):
            result = await host.start_turn("bob", {}, purpose="p")
    reply = output(result)["output"]
    assert reply["carol"]["output"] == {"note": "thursday"}


async def test_chain_deeper_than_in_flight_bound_ends_typed_not_hanging(
        redis: Redis, ns: str, cleanup: None) -> None:
    async def alice(turn: TurnRequest, host: RuntimeHost) -> JsonValue:
        note = await host.call("messages.request", {
            "recipient": {"kind": "agent", "agentId": "carol"}, "payload": {}})
        return note.to_wire()

    host = make_host(redis, ns, {"bob": ask("alice", {}), "alice": alice,
                                 "carol": answer("unreachable")},
                     max_jobs=1, max_in_flight=1, request_timeout_s=4, turn_timeout_s=3,
                     lease_s=1)
    await put(host, send_grant(ns, "bob", "alice"), send_grant(ns, "alice", "carol"),
              *(invoke_grant(ns, who) for who in ("bob", "alice", "carol")))
    async with host, LocalWorker(host) as worker:
        began = time.monotonic()
        with anyio.fail_after(8):
            result = await host.start_turn("bob", {}, purpose="p")
        elapsed = time.monotonic() - began
    # carol's turn cannot start: alice's waiting turn gave its running slot back but still
    # counts against max_in_flight=1, and alice waits on carol. The worker sees it (every
    # in-flight turn waits on a request queued here) and fails carol's request
    # request_deadlocked at once, not at her deadline; alice answers, bob gets it. (With
    # max_in_flight=2, see test_slots.py, it completes.)
    to_alice = output(result)
    assert to_alice["status"] == "succeeded"
    to_carol = to_alice["output"]
    assert to_carol["status"] == "failed"
    assert to_carol["error"]["details"] == {"outcome": "request_deadlocked"}
    assert "request_deadlocked" in worker.outcomes
    assert elapsed < 2, elapsed  # the nested deadline is 3 s away


async def test_trace_budget_stops_ping_pong(redis: Redis, ns: str, cleanup: None) -> None:
    host = make_host(redis, ns, {"ping": ask("pong", {}), "pong": ask("ping", {})})
    await put(host, send_grant(ns, "ping", "pong"), send_grant(ns, "pong", "ping"),
              invoke_grant(ns, "ping"), invoke_grant(ns, "pong"))
    async with host, LocalWorker(host) as worker:
        with anyio.fail_after(10):
            result = await host.start_turn("ping", {}, purpose="rally", hops=3)
    depth, node = 0, output(result)
    while node.get("status") == "succeeded":
        depth, node = depth + 1, node["output"]
    assert depth == 3  # three hops accepted, the fourth refused
    assert node["error"]["code"] == "message_request_not_accepted"
    assert worker.outcomes.count("replied") == 3


async def test_start_turn_outside_the_host_context_is_refused(redis: Redis, ns: str) -> None:
    from sharedos_redis.errors import ConfigurationError

    host = make_host(redis, ns, {"bob": answer(None)})
    with pytest.raises(ConfigurationError, match="async with host"):
        await host.start_turn("bob", {}, purpose="p")
    with pytest.raises(ConfigurationError):
        host.context_for("nobody", purpose="p", trace_id="t")


async def test_a_reply_over_the_limit_fails_the_request_and_stores_nothing(
        redis: Redis, ns: str, cleanup: None) -> None:
    marker = "HUGE-REPLY-" + "z" * 2000
    host = make_host(redis, ns, {"bob": ask("alice", {}), "alice": answer({"blob": marker})},
                     max_reply_bytes=1024)
    await put(host, send_grant(ns, "bob", "alice"), invoke_grant(ns, "bob"),
              invoke_grant(ns, "alice"))
    async with host, LocalWorker(host):
        with anyio.fail_after(10):
            result = await host.start_turn("bob", {}, purpose="atlas-status")
    failed = output(result)
    assert failed["status"] == "failed"
    assert failed["error"]["details"] == {"outcome": "reply_too_large"}
    stored: list[bytes] = []
    for key in await scan_keyspace(redis, ns):
        kind = await redis.type(key)
        if kind == b"hash":
            stored += (await redis.hgetall(key)).values()
        elif kind == b"stream":
            stored += [v for _, fields in await redis.xrange(key) for v in fields.values()]
    assert stored and not any(b"HUGE-REPLY" in value for value in stored)


async def test_an_escalated_recipient_turn_is_a_typed_outcome_for_the_requester(
        redis: Redis, ns: str, cleanup: None) -> None:
    async def alice(turn: TurnRequest, host: RuntimeHost) -> JsonValue:
        await host.call("sharedos.escalate", {"reason": "a human must approve this"})
        return "unused"

    host = make_host(redis, ns, {"bob": ask("alice", {}), "alice": alice},
                     tool_namespaces=("messages", "files", "sharedos"))
    await put(host, send_grant(ns, "bob", "alice"), invoke_grant(ns, "bob"),
              invoke_grant(ns, "alice"))
    async with host, LocalWorker(host):
        with anyio.fail_after(10):
            result = await host.start_turn("bob", {}, purpose="atlas-status")
    failed = output(result)
    assert failed["status"] == "failed"
    assert failed["error"]["details"] == {"outcome": "recipient_turn_escalated"}
    assert await host.router.pending(ns) == []


async def test_the_redis_host_ceiling_denies_what_an_operator_rules_out(
        redis: Redis, ns: str, cleanup: None) -> None:
    async def alice(turn: TurnRequest, host: RuntimeHost) -> JsonValue:
        result = await host.call("files.alice", {})
        return result.error.code if result.status != "succeeded" else "read"

    host = make_host(redis, ns, {"bob": ask("alice", {}), "alice": alice}, host_ceiling=True)
    host.register_tool(tool("files.alice", "files", ("alice",)), read_file_handler)
    await put(host, send_grant(ns, "bob", "alice"), invoke_grant(ns, "bob"),
              invoke_grant(ns, "alice"), grant(ns, "alice", "files", ("alice",), "read"))
    async with host, LocalWorker(host):
        with anyio.fail_after(10):
            before = output(await host.start_turn("bob", {}, purpose="atlas-status"))
        await host.policy.deny(ns, "files", "read")
        with anyio.fail_after(10):
            after = output(await host.start_turn("bob", {}, purpose="atlas-status"))
    assert before["output"] == "read"
    assert after["output"] == "tool_unavailable"  # the ceiling hides what it refuses
    events = [e for _, e in await host.audit.read(ns)]
    assert any(e.reason == "host_policy_denied" for e in events)
