"""The transport's and stores' Lua scripts called directly (KEYS/ARGV contracts)."""

from __future__ import annotations

import time

import pytest
from redis.asyncio import Redis

from sharedos_redis.kernel.ports import RevocationCheck
from sharedos_redis.store.audit import entry_wires
from sharedos_redis.store.grants import RedisGrantStore
from sharedos_redis.store.keys import RELAY_GROUP, Keys
from sharedos_redis.store.scripts import Scripts, named_args

from ..support import Keyspace, make_context, make_envelope

pytestmark = pytest.mark.anyio


def _accept_args(
    ns: str, mid: str = "m-1", *, default_hops: int = 2, grant_id: str = "", **named: str
) -> tuple[list[str], list[object]]:
    """accept_request's keys and ARGV (``named`` overrides any named argument)."""
    keys = Keys(ns)
    ctx = make_context(ns)
    env = make_envelope(ctx, id=mid)
    now = int(time.time() * 1000)
    args = {"id": mid, "from": "agent:bob", "to": "agent:alice", "purpose": "p",
            "trace": "trace-1", "now": str(now), "deadline": str(now + 1000),
            "retention": "60000", "hops": str(default_hops), "budget_ttl": "5000",
            "maxlen": "1000", "tp": "", "grant": grant_id, "parent": "", "fp": "fp-1",
            "attempt": "", "route": "", "h": "", "env": env.to_json(), "ctx": ctx.to_json(),
            "accepted": '{"audit":1}', "released": '{"released":1}' if grant_id else "",
            "decided": "0"}
    return (
        [keys.message(mid), keys.budget("trace-1"), keys.open, keys.outbox, keys.audit,
         keys.usage, keys.trace("trace-1"), keys.message(mid), keys.agents],
        named_args("accept_request", **(args | named)),
    )


def _refused(code: str) -> dict[str, object]:
    """The message.refused record the script derives from the accepted one (``{"audit":1}``)."""
    return {"audit": 1, "type": "message.refused", "outcome": "denied", "reason": code}


async def test_accept_request_spends_then_refuses_without_writing(
    redis: Redis, ns: str, keys: Keys, keyspace: Keyspace
) -> None:
    scripts = Scripts(redis)
    results = []
    for mid in ("m-1", "m-2", "m-3"):
        results.append(await scripts.call("accept_request", *_accept_args(ns, mid)))
    assert results == [[b"accepted", 1], [b"accepted", 0], [b"budget_exhausted", 0]]
    duplicate = await scripts.call("accept_request", *_accept_args(ns, "m-1"))
    assert duplicate == [b"duplicate_message", -1]
    assert not await redis.exists(keys.message("m-3"))
    assert await redis.xlen(keys.outbox) == 2
    records = [w for _, fields in await redis.xrange(keys.audit) for w in entry_wires(fields)]
    assert records == [{"audit": 1}, {"audit": 1}, _refused("budget_exhausted"),
                       _refused("duplicate_message")]  # every refusal audited, in the script
    assert 0 < await redis.pttl(keys.budget("trace-1")) <= 5_000
    assert len(await keyspace()) == 7  # 2 markers, budget, open, outbox, audit, trace index


async def test_accept_request_gives_back_a_reserved_use_when_it_refuses(
    redis: Redis, ns: str, keys: Keys, keyspace: Keyspace
) -> None:
    scripts = Scripts(redis)
    await redis.hset(keys.usage, "g-1", 3)  # three uses reserved by three decisions
    assert await scripts.call("accept_request", *_accept_args(
        ns, "m-1", default_hops=1, grant_id="g-1")) == [b"accepted", 0]
    assert await scripts.call("accept_request", *_accept_args(
        ns, "m-2", default_hops=1, grant_id="g-1")) == [b"budget_exhausted", 0]
    assert await scripts.call("accept_request", *_accept_args(
        ns, "m-1", grant_id="g-1")) == [b"duplicate_message", -1]
    assert await redis.hget(keys.usage, "g-1") == b"1"  # only the admitted use stays spent
    records = [w for _, fields in await redis.xrange(keys.audit) for w in entry_wires(fields)]
    assert records == [{"audit": 1}, {"released": 1, "reason": "budget_exhausted"},
                       _refused("budget_exhausted"),
                       {"released": 1, "reason": "duplicate_message"},
                       _refused("duplicate_message")]
    await redis.hset(keys.usage, "g-1", 0)
    assert await scripts.call("accept_request", *_accept_args(
        ns, "m-1", grant_id="g-1")) == [b"duplicate_message", -1]
    assert await redis.hget(keys.usage, "g-1") == b"0"  # never below zero, no use released
    records = [w for _, fields in await redis.xrange(keys.audit) for w in entry_wires(fields)]
    assert records[5:] == [_refused("duplicate_message")]  # only the refusal recorded


async def test_release_grant_use_gives_back_one_use_with_its_record(
    redis: Redis, ns: str, keys: Keys, keyspace: Keyspace
) -> None:
    scripts = Scripts(redis)
    args = ["g-1", 1000, "e", "released"]
    assert await scripts.call("release_grant_use", [keys.usage, keys.audit], args) == 0
    assert await keyspace() == set()
    await redis.hset(keys.usage, "g-1", 2)
    assert await scripts.call("release_grant_use", [keys.usage, keys.audit], args) == 1
    assert await scripts.call("release_grant_use", [keys.usage, keys.audit],
                              ["g-1", 1000, "", ""]) == 1
    assert await redis.hget(keys.usage, "g-1") == b"0"
    assert await redis.xlen(keys.audit) == 1


async def test_accept_request_fails_closed_on_a_corrupt_budget(
    redis: Redis, ns: str, keys: Keys, keyspace: Keyspace
) -> None:
    await redis.set(keys.budget("trace-1"), "lots")
    result = await Scripts(redis).call("accept_request", *_accept_args(ns))
    assert result == [b"budget_exhausted", 0]
    assert await keyspace() == {keys.budget("trace-1"), keys.audit}  # its refusal record


async def test_dispatch_request_moves_only_accepted_markers(
    redis: Redis, ns: str, keys: Keys, keyspace: Keyspace
) -> None:
    scripts = Scripts(redis)
    await redis.xgroup_create(keys.outbox, RELAY_GROUP, id="0", mkstream=True)
    for mid in ("m-1", "m-2"):
        await scripts.call("accept_request", *_accept_args(ns, mid, default_hops=5))
    await redis.hset(keys.message("m-2"), "ctx", "{not json")
    [[_, entries]] = await redis.xreadgroup(RELAY_GROUP, "c", {keys.outbox: ">"})
    (first, _), (second, _) = entries

    def args(entry: bytes, mid: str) -> list[object]:
        return named_args("dispatch_request", group=RELAY_GROUP, entry=entry, id=mid, now=123,
                          at="2026-01-01T00:00:00.000Z", event="ev-1", audit_maxlen=1000)

    assert await scripts.call("dispatch_request", [keys.message("m-1"), keys.outbox, keys.audit],
                              args(first, "m-1")) == 1
    assert await scripts.call("dispatch_request", [keys.message("m-1"), keys.outbox, keys.audit],
                              args(first, "m-1")) == 0  # a second dispatch changes nothing
    assert await scripts.call("dispatch_request", [keys.message("m-2"), keys.outbox, keys.audit],
                              args(second, "m-2")) == -1
    assert await redis.hmget(keys.message("m-1"), "state", "updated") == [b"dispatched", b"123"]
    assert await redis.hget(keys.message("m-2"), "state") == b"accepted"
    assert await redis.xlen(keys.outbox) == 0
    [*_, (_, last)] = await redis.xrange(keys.audit)
    [event] = entry_wires(last)
    assert event["type"] == "message.dispatched" and event["messageId"] == "m-1"
    assert event["actor"] == {"kind": "agent", "agentId": "bob"}
    assert len(await keyspace()) == 7  # 2 markers, budget, open, outbox, audit, trace index


async def test_consume_grant_use_stops_at_max(
    redis: Redis, ns: str, keys: Keys, keyspace: Keyspace
) -> None:
    scripts = Scripts(redis)
    spent = [await scripts.call("consume_grant_use", [keys.usage], ["g-1", 3]) for _ in range(5)]
    assert spent == [1, 1, 1, 0, 0]
    assert await redis.hget(keys.usage, "g-1") == b"3"
    assert await keyspace() == {keys.usage}


async def test_swap_grant_is_compare_and_set(
    redis: Redis, ns: str, keys: Keys, keyspace: Keyspace
) -> None:
    scripts = Scripts(redis)
    key = keys.grants("agent", "bob")
    swap = [key, keys.revocations]
    await redis.hset(key, "g-1", "v1")
    assert await scripts.call("swap_grant", swap, ["g-1", "v0", "v2", 5000]) == 0
    assert await keyspace() == {key}  # nothing recorded when the compare fails
    assert await scripts.call("swap_grant", swap, ["g-1", "v1", "v2", 5000]) == 1
    assert await scripts.call("swap_grant", swap, ["g-1", "v2", "v3", 9000]) == 1
    assert await scripts.call("swap_grant", swap, ["g-9", "v1", "v2", 1]) == -1
    assert await redis.hgetall(key) == {b"g-1": b"v3"}
    assert await redis.hgetall(keys.revocations) == {  # the earliest is kept
        b"g-1": b"5000", b"": b"2"}  # field "": the revision
    assert await keyspace() == set(swap)


async def test_check_revocations_reads_every_id_at_the_instant(
    redis: Redis, ns: str, keys: Keys, keyspace: Keyspace
) -> None:
    grants = RedisGrantStore(redis)
    assert await grants.check(ns, ["g-1"], 10) == RevocationCheck("0", frozenset())
    await redis.hset(keys.revocations, mapping={"g-1": 5, "g-2": 20, "": 7})
    assert await grants.check(ns, ["g-1", "g-2", "g-3"], 10) == RevocationCheck(
        "7", frozenset({"g-1"}))
    assert await keyspace() == {keys.revocations}


async def test_put_grant_keeps_ids_unique_and_never_reuses_a_revoked_one(
    redis: Redis, ns: str, keys: Keys, keyspace: Keyspace
) -> None:
    scripts = Scripts(redis)
    bob, eve = keys.grants("agent", "bob"), keys.grants("agent", "eve")
    put = [keys.grant_ids, keys.revocations]
    assert await scripts.call("put_grant", [bob, *put], ["g-1", "v1", "agent:bob"]) == 1
    assert await scripts.call("put_grant", [bob, *put], ["g-1", "v2", "agent:bob"]) == 1
    assert await scripts.call("put_grant", [eve, *put], ["g-1", "x", "agent:eve"]) == 0
    await redis.hset(keys.revocations, "g-2", 1)
    assert await scripts.call("put_grant", [bob, *put], ["g-2", "v", "agent:bob"]) == -1
    assert await redis.hgetall(bob) == {b"g-1": b"v2"}
    assert await keyspace() == {bob, keys.grant_ids, keys.revocations}
