"""The agent directory and the accept script's route check (SharedOS ADR 0025).

A request to an agent no live worker serves, or to a non-agent address, is refused at
accept with a host route code, after authorization and before any hop is spent; the
reserved ``maxUses`` use is given back in the same script. A model without a send
grant never meets a route code. Runs on fakeredis and on real Redis (REDIS_URL).
"""

from __future__ import annotations

import pytest
from redis.asyncio import Redis

from sharedos_redis.kernel.contracts import (
    CapabilityGrant,
    ToolCall,
    agent,
    format_timestamp,
)
from sharedos_redis.kernel.kernel import Kernel
from sharedos_redis.kernel.testing import InMemoryRouter
from sharedos_redis.store.audit import RedisAuditSink, entry_wires
from sharedos_redis.store.directory import AgentDirectory
from sharedos_redis.store.grants import RedisGrantStore
from sharedos_redis.store.keys import Keys, encode_id
from sharedos_redis.store.scripts import Scripts
from sharedos_redis.store.usage import RedisGrantUsageStore
from sharedos_redis.transport import RedisStreamTransport, TransportSettings

from ..lua.test_transport_scripts import _accept_args
from ..support import make_context, now_ms, serve

pytestmark = pytest.mark.anyio



def _routed(ns: str, mid: str, to: str, *, grant_id: str = "") -> tuple[list[str], list[object]]:
    """accept_request's arguments with the route check on, to ``to`` (a marker tag)."""
    return _accept_args(ns, mid, grant_id=grant_id, route="1", to=to)


async def test_the_script_refuses_unrouted_recipients_and_gives_the_use_back(
        redis: Redis, ns: str, cleanup: None) -> None:
    keys, scripts = Keys(ns), Scripts(redis)
    await redis.hset(keys.usage, "g", 1)  # the use the decision reserved
    past = AgentDirectory(redis, now_ms=now_ms() - 60_000)
    await past.register(ns, ["carol"], 1.0)  # a worker that stopped a minute ago
    results = [await scripts.call("accept_request", *_routed(ns, f"m-{to}", to, grant_id="g"))
               for to in ("agent:alice", "group:ops", "human:olivia", "agent:carol")]
    assert results == [[b"route_unavailable", -1], [b"route_not_agent", -1],
                       [b"route_not_agent", -1], [b"route_unavailable", -1]]
    # nothing spent, nothing written: no marker, no hop, no outbox entry, the use back
    assert await redis.hget(keys.usage, "g") == b"0"
    assert not await redis.exists(keys.budget("trace-1"), keys.outbox, keys.open,
                                  keys.trace("trace-1"), *(keys.message(f"m-{to}") for to in (
                                      "agent:alice", "group:ops", "agent:carol")))
    records = [w for _, fields in await redis.xrange(keys.audit) for w in entry_wires(fields)]
    released = [r for r in records if r.get("type") != "message.refused"]
    assert [r.get("reason") for r in released] == ["route_unavailable"]  # one use to give
    refused = [r["reason"] for r in records if r.get("type") == "message.refused"]
    assert refused == ["route_unavailable", "route_not_agent", "route_not_agent",
                       "route_unavailable"]  # every refusal audited, in the script
    await serve(redis, ns, "alice")
    accepted = await scripts.call("accept_request", *_routed(ns, "m-ok", "agent:alice"))
    assert accepted == [b"accepted", 1]


async def test_an_id_needing_encoding_is_looked_up_as_the_marker_names_it(
        redis: Redis, ns: str, cleanup: None) -> None:
    await serve(redis, ns, "a:b c")
    result = await Scripts(redis).call(
        "accept_request", *_routed(ns, "m-1", f"agent:{encode_id('a:b c')}"))
    assert result == [b"accepted", 1]


async def test_the_latest_lease_stands_and_old_entries_are_pruned(
        redis: Redis, ns: str, cleanup: None) -> None:
    now = now_ms()
    directory = AgentDirectory(redis)
    long_lease = await directory.register(ns, ["alice"], 60)
    await directory.register(ns, ["alice"], 1)  # a second worker with a shorter lease
    assert await directory.expiry(ns, "alice") == long_lease >= now + 60_000
    await AgentDirectory(redis, now_ms=now - 5_000).register(ns, ["bob"], 1)
    await AgentDirectory(redis, now_ms=now - 600_000).register(ns, ["zed"], 1)
    dead = await directory.dead(ns, horizon_s=120)
    assert dead.agents == {"bob"} and dead.now_ms >= now
    assert await directory.expiry(ns, "zed") is None  # older than the horizon: deleted
    assert await directory.expiry(ns, "carol") is None


def _grant(ns: str, kind: str, ident: str, grant_id: str) -> CapabilityGrant:
    return CapabilityGrant.from_wire({
        "id": grant_id, "namespaceId": ns, "subject": agent("bob").to_wire(),
        "issuer": agent("host").to_wire(),
        "capabilities": [{"resource": {"namespace": "sharedos.messaging",
                                       "path": [kind, ident]},
                          "actions": ["send"], "scope": "exact"}],
        "constraints": {"maxUses": 2}, "issuedAt": "2026-01-01T00:00:00Z"})


def _ask(kind: str, ident: str, n: int) -> ToolCall:
    key = {"agent": "agentId", "group": "conversationId", "service": "serviceId"}[kind]
    return ToolCall.from_wire({
        "id": f"call-{n}", "tool": "messages.request", "traceId": "trace-1",
        "requestedAt": format_timestamp(),
        "arguments": {"recipient": {"kind": kind, key: ident}, "payload": {"n": n}}})


async def _kernel(redis: Redis, ns: str) -> Kernel:
    grants = RedisGrantStore(redis)
    for kind, ident in (("agent", "alice"), ("group", "ops")):
        await grants.put(_grant(ns, kind, ident, f"g-{ident}"))
    return Kernel(grants=grants, usage=RedisGrantUsageStore(redis), audit=RedisAuditSink(redis),
                  transport=RedisStreamTransport(redis, settings=TransportSettings()),
                  router=InMemoryRouter(payload="ok"))


async def test_messages_request_to_an_unserved_or_non_agent_recipient_is_a_typed_denial(
        redis: Redis, ns: str, cleanup: None) -> None:
    kernel, keys, ctx = await _kernel(redis, ns), Keys(ns), make_context(ns)
    results = [await kernel.invoke_tool(ctx, _ask("agent", "alice", 1)),
               await kernel.invoke_tool(ctx, _ask("group", "ops", 2))]
    assert [(r.status, r.error.code if r.error else None,
             r.error.details if r.error else None) for r in results] == [
        ("failed", "message_request_not_accepted",
         {"status": "denied", "code": "route_unavailable"}),
        ("failed", "message_request_not_accepted",
         {"status": "denied", "code": "route_not_agent"})]
    # no use and no hop stay spent
    assert await RedisGrantUsageStore(redis).used(ns, "g-alice") == 0
    assert await RedisGrantUsageStore(redis).used(ns, "g-ops") == 0
    assert not await redis.exists(keys.budget("trace-1"), keys.outbox)
    events = [e for _, e in await RedisAuditSink(redis).read(ns)]
    assert [(e.type, e.reason) for e in events if e.type in (
        "message.refused", "grant.usage.released")] == [
        ("grant.usage.released", "route_unavailable"), ("message.refused", "route_unavailable"),
        ("grant.usage.released", "route_not_agent"), ("message.refused", "route_not_agent")]
    # once a worker serves alice the same grant works, and spends exactly one use and hop
    await serve(redis, ns, "alice")
    served = await kernel.invoke_tool(ctx, _ask("agent", "alice", 3))
    assert served.status == "succeeded"
    assert await RedisGrantUsageStore(redis).used(ns, "g-alice") == 1
    assert await redis.get(keys.budget("trace-1")) == b"15"


async def test_without_a_grant_the_directory_is_never_revealed(
        redis: Redis, ns: str, cleanup: None) -> None:
    """The attacker probes agents it may not ask: served or not, the answer is the same
    authorization denial, never a route code (the directory is not an oracle)."""
    kernel, ctx = await _kernel(redis, ns), make_context(ns)
    await serve(redis, ns, "carol")
    answers = []
    for n, target in enumerate(("carol", "zed")):  # carol is served, zed is not
        result = await kernel.invoke_tool(ctx, _ask("agent", target, n))
        answers.append(result.to_json().replace(target, "X").replace(f"call-{n}", "call"))
        assert result.status == "denied" and result.error is not None
        assert result.error.code == "no_matching_grant"
        assert "route" not in result.to_json()
    assert len({a.split('"completedAt"')[0] for a in answers}) == 1  # indistinguishable
    events = [e for _, e in await RedisAuditSink(redis).read(ns)]
    assert not [e for e in events if e.reason in ("route_unavailable", "route_not_agent")]
    assert await RedisGrantUsageStore(redis).used(ns, "g-alice") == 0
