"""accept_request for nested requests, called directly: fencing, re-attach, replay conflicts.

A nested request carries its parent request, its replay fingerprint and the parent turn's
attempt. Each test checks what the script returns and what it spent: hops (the budget key),
uses (the usage hash) and the records it wrote.
"""

from __future__ import annotations

import time

import pytest
from redis.asyncio import Redis

from sharedos_redis.store.audit import entry_wires
from sharedos_redis.store.keys import Keys
from sharedos_redis.store.scripts import Scripts, named_args

from ..support import Keyspace, make_context, make_envelope

pytestmark = pytest.mark.anyio

PARENT = "p-1"
CHILD = "c-1"


def _nested(ns: str, mid: str = CHILD, *, attempt: str = "1", fp: str = "fp-1",
            parent: str = PARENT, grant_id: str = "g-1") -> tuple[list[str], list[object]]:
    keys = Keys(ns)
    ctx = make_context(ns)
    env = make_envelope(ctx, id=mid)
    now = int(time.time() * 1000)
    named = {"id": mid, "from": "agent:bob", "to": "agent:alice", "purpose": "p",
             "trace": "trace-1", "now": str(now), "deadline": str(now + 1000),
             "retention": "60000", "hops": "5", "budget_ttl": "5000", "maxlen": "1000",
             "tp": "", "grant": grant_id, "parent": parent, "fp": fp, "attempt": attempt,
             "route": "", "h": ""}
    parent_key = keys.message(parent) if parent else keys.message(mid)
    return (
        [keys.message(mid), keys.budget("trace-1"), keys.open, keys.outbox, keys.audit,
         keys.usage, keys.trace("trace-1"), parent_key, keys.agents],
        # the accepted and released records, no decision records, one record written only
        # if accepted (the kernel's message.sent)
        named_args("accept_request", '{"sent":1}', **named, env=env.to_json(),
                   ctx=ctx.to_json(), accepted='{"accepted":1}',
                   released='{"released":1}' if grant_id else "", decided="0"),
    )


async def _records(redis: Redis, keys: Keys) -> list[dict[str, object]]:
    return [wire for _, fields in await redis.xrange(keys.audit) for wire in entry_wires(fields)]


async def _turn(redis: Redis, keys: Keys, state: str, attempts: int) -> None:
    await redis.hset(keys.message(PARENT), mapping={"state": state, "attempts": attempts})


async def _reserve(redis: Redis, keys: Keys) -> None:
    await redis.hincrby(keys.usage, "g-1", 1)  # what the authorizer's decision reserves


async def test_the_same_call_of_a_later_attempt_re_attaches_and_spends_nothing(
    redis: Redis, ns: str, keys: Keys, keyspace: Keyspace
) -> None:
    scripts = Scripts(redis)
    await _turn(redis, keys, "running", 1)
    await _reserve(redis, keys)
    assert await scripts.call("accept_request", *_nested(ns)) == [b"accepted", 4]
    deadline = int(await redis.hget(keys.message(CHILD), "deadline"))
    marker = await redis.hgetall(keys.message(CHILD))
    assert (marker[b"parent"], marker[b"fp"]) == (PARENT.encode(), b"fp-1")

    await _turn(redis, keys, "running", 2)  # attempt 1 died; attempt 2 runs the turn again
    await _reserve(redis, keys)
    attached = await scripts.call("accept_request", *_nested(ns, attempt="2"))

    assert attached == [b"attached", deadline, b"accepted"]
    assert await redis.hgetall(keys.message(CHILD)) == marker  # nothing rewritten
    assert await redis.get(keys.budget("trace-1")) == b"4"  # one hop for the edge
    assert await redis.hget(keys.usage, "g-1") == b"1"  # one use for the edge
    assert await redis.xlen(keys.outbox) == 1  # one wake-up: the turn runs once
    assert await redis.zcard(keys.trace("trace-1")) == 1
    assert await _records(redis, keys) == [
        {"accepted": 1}, {"sent": 1},
        {"released": 1, "reason": "replay_attached"},
        {"accepted": 1, "type": "message.replayed", "outcome": "succeeded",
         "metadata": {"state": "accepted", "attempt": 2}},
        {"sent": 1}]


async def test_a_settled_request_re_attaches_with_its_state(
    redis: Redis, ns: str, keys: Keys, keyspace: Keyspace
) -> None:
    scripts = Scripts(redis)
    await _turn(redis, keys, "running", 1)
    assert (await scripts.call("accept_request", *_nested(ns, grant_id="")))[0] == b"accepted"
    await redis.hset(keys.message(CHILD), "state", "replied")
    await _turn(redis, keys, "running", 3)
    attached = await scripts.call("accept_request", *_nested(ns, attempt="3", grant_id=""))
    assert attached[0::2] == [b"attached", b"replied"]
    assert await redis.get(keys.budget("trace-1")) == b"4"


@pytest.mark.parametrize("changed", [{"fp": "fp-other"}, {"parent": "p-other"}])
async def test_a_changed_call_is_a_replay_conflict_that_writes_nothing(
    changed: dict[str, str], redis: Redis, ns: str, keys: Keys, keyspace: Keyspace
) -> None:
    scripts = Scripts(redis)
    await _turn(redis, keys, "running", 1)
    await _reserve(redis, keys)
    assert (await scripts.call("accept_request", *_nested(ns)))[0] == b"accepted"
    marker = await redis.hgetall(keys.message(CHILD))
    if "parent" in changed:  # that parent's turn is live too: only the call differs
        await redis.hset(keys.message(changed["parent"]),
                         mapping={"state": "running", "attempts": 2})
    else:
        await _turn(redis, keys, "running", 2)
    await _reserve(redis, keys)
    refused = await scripts.call("accept_request", *_nested(ns, attempt="2", **changed))

    assert refused == [b"replay_conflict", -1]
    assert await redis.hgetall(keys.message(CHILD)) == marker
    assert await redis.get(keys.budget("trace-1")) == b"4"
    assert await redis.hget(keys.usage, "g-1") == b"1"
    assert await redis.xlen(keys.outbox) == 1
    assert (await _records(redis, keys))[2:] == [
        {"released": 1, "reason": "replay_conflict"},
        {"accepted": 1, "type": "message.refused", "outcome": "denied",
         "reason": "replay_conflict"}]


async def test_a_root_request_with_a_taken_id_stays_a_duplicate(
    redis: Redis, ns: str, keys: Keys, keyspace: Keyspace
) -> None:
    scripts = Scripts(redis)
    root = _nested(ns, parent="", attempt="", grant_id="")
    assert (await scripts.call("accept_request", *root))[0] == b"accepted"
    assert await scripts.call("accept_request", *root) == [b"duplicate_message", -1]


@pytest.mark.parametrize(("state", "attempts"), [
    ("running", 2),  # a newer attempt holds the turn
    ("dispatched", 1),  # handed back: nobody runs it now
    ("replied", 1),  # the turn ended
    (None, 0),  # the parent's record is gone
])
async def test_a_stale_attempt_is_fenced_before_it_accepts_or_re_attaches(
    state: str | None, attempts: int, redis: Redis, ns: str, keys: Keys, keyspace: Keyspace
) -> None:
    scripts = Scripts(redis)
    await _turn(redis, keys, "running", 1)
    assert (await scripts.call("accept_request", *_nested(ns, grant_id="")))[0] == b"accepted"
    if state is None:
        await redis.delete(keys.message(PARENT))
    else:
        await _turn(redis, keys, state, attempts)
    before = {key: await redis.type(key) for key in await keyspace()}
    await _reserve(redis, keys)
    audit = len(await _records(redis, keys))

    again = await scripts.call("accept_request", *_nested(ns))  # attempt 1, the same call
    fresh = await scripts.call("accept_request", *_nested(ns, "c-2"))  # attempt 1, a new one

    assert again == fresh == [b"turn_lease_lost", -1]
    assert not await redis.exists(keys.message("c-2"))
    assert await redis.get(keys.budget("trace-1")) == b"4"
    assert await redis.hget(keys.usage, "g-1") == b"0"  # the reserved use given back once
    refused = {"accepted": 1, "type": "message.refused", "outcome": "denied",
               "reason": "turn_lease_lost"}
    assert (await _records(redis, keys))[audit:] == [
        {"released": 1, "reason": "turn_lease_lost"}, refused, refused]
    assert await redis.xlen(keys.outbox) == 1
    assert await keyspace() == set(before) | {keys.usage}  # nothing new for the message
