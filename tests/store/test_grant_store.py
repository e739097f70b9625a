"""RedisGrantStore: validated in and out, scoped by subject and issuer, revocation by CAS."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable

import anyio
import pytest
from redis.asyncio import Redis

from sharedos_redis.errors import ConfigurationError, ContractError, StoreUnavailable
from sharedos_redis.kernel.authorizer import CapabilityAuthorizer
from sharedos_redis.kernel.contracts import CapabilityRequirement, agent, human, timestamp_ms
from sharedos_redis.kernel.memory import InMemoryAuditSink
from sharedos_redis.kernel.ports import (
    CheckedGrantSource,
    DelegationChainResolver,
    GrantRevocationSource,
    GrantSource,
    RevocationCheck,
)
from sharedos_redis.store.grants import RedisGrantStore
from sharedos_redis.store.keys import Keys

from .store_support import drop_namespace, make_context, make_grant, namespace_keys

pytestmark = pytest.mark.anyio


async def test_grants_for_returns_only_the_actors_grants_from_that_authority(
    redis: Redis, ns: str
) -> None:
    store = RedisGrantStore(redis)
    source: GrantSource = store
    try:
        await store.put(make_grant(ns, "g-2", issuedAt="2026-02-01T00:00:00Z"))
        await store.put(make_grant(ns, "g-1"))
        await store.put(make_grant(ns, "g-other-issuer", issuer=human("mallory")))
        await store.put(make_grant(ns, "g-alice", subject=agent("alice")))
        await store.put(make_grant(f"{ns}-x", "g-other-ns"))

        mine = await source.grants_for(ns, agent("bob"), agent("host"))

        assert [g.id for g in mine] == ["g-1", "g-2"]
        assert [g.id for g in await store.list(ns, agent("bob"))] == [
            "g-1", "g-other-issuer", "g-2"]  # by issuedAt, then id
        assert await store.grants_for(ns, human("bob"), agent("host")) == []
        assert await namespace_keys(redis, ns) == {Keys(ns).grants("agent", "bob"),
                                                   Keys(ns).grants("agent", "alice"),
                                                   Keys(ns).grant_ids}
    finally:
        await drop_namespace(redis, ns)
        await drop_namespace(redis, f"{ns}-x")


@pytest.mark.parametrize("combined", [False, True], ids=["grants_for", "grants_checked"])
async def test_corrupt_stored_grant_raises_so_the_kernel_fails_closed(
    redis: Redis, ns: str, combined: bool
) -> None:
    """Both reads (the grant load and the combined read) refuse a corrupt grant."""
    store = RedisGrantStore(redis)
    try:
        await store.put(make_grant(ns))
        forged = make_grant(ns, "g-x").to_wire() | {"constraints": {"maxUses": 0}}
        await redis.hset(Keys(ns).grants("agent", "bob"), "g-x", json.dumps(forged))
        with pytest.raises(ContractError):
            if combined:
                await store.grants_checked(ns, agent("bob"), agent("host"), 0)
            else:
                await store.grants_for(ns, agent("bob"), agent("host"))
    finally:
        await drop_namespace(redis, ns)


async def test_put_revalidates_a_constructed_grant(redis: Redis, ns: str) -> None:
    bogus = make_grant(ns).model_construct(**{**dict(make_grant(ns)), "id": ""})
    with pytest.raises(ContractError):
        await RedisGrantStore(redis).put(bogus)
    assert await namespace_keys(redis, ns) == set()


async def test_revoke_marks_keeps_the_earliest_and_reports_missing(
    redis: Redis, ns: str
) -> None:
    store = RedisGrantStore(redis)
    try:
        await store.put(make_grant(ns))
        assert await store.revoke(ns, agent("bob"), "g-1", "2026-03-01T00:00:00Z")
        assert await store.revoke(ns, agent("bob"), "g-1", "2026-04-01T00:00:00Z")
        [grant] = await store.list(ns, agent("bob"))
        assert grant.revoked_at == "2026-03-01T00:00:00Z"
        assert await store.revoke(ns, agent("bob"), "g-1", "2026-02-01T00:00:00Z")
        [grant] = await store.list(ns, agent("bob"))
        assert grant.revoked_at == "2026-02-01T00:00:00Z"
        assert not await store.revoke(ns, agent("bob"), "nope", "2026-02-01T00:00:00Z")
        assert not await store.revoke(ns, agent("alice"), "g-1", "2026-02-01T00:00:00Z")
    finally:
        await drop_namespace(redis, ns)


async def test_concurrent_revocations_keep_the_earliest(
    redis_factory: Callable[[], Awaitable[Redis]], ns: str
) -> None:
    clients = [await redis_factory() for _ in range(3)]
    stores = [RedisGrantStore(client) for client in clients]
    try:
        await stores[0].put(make_grant(ns))
        async with anyio.create_task_group() as tg:
            for day in range(10, 28):
                tg.start_soon(stores[day % 3].revoke, ns, agent("bob"), "g-1",
                              f"2026-05-{day:02d}T00:00:00Z")
        [grant] = await stores[1].list(ns, agent("bob"))
        assert grant.revoked_at == "2026-05-10T00:00:00Z"
    finally:
        await drop_namespace(clients[0], ns)


async def test_a_grant_id_names_one_grant_in_its_namespace(redis: Redis, ns: str) -> None:
    """Per-grant use counters are keyed by id: a second subject may not reuse the id."""
    store = RedisGrantStore(redis)
    try:
        await store.put(make_grant(ns, "g-shared", constraints={"maxUses": 1}))
        with pytest.raises(ConfigurationError):
            await store.put(make_grant(ns, "g-shared", subject=agent("eve")))
        await store.put(make_grant(ns, "g-shared", constraints={"maxUses": 2}))  # same subject
        assert await store.list(ns, agent("eve")) == []
        await store.put(make_grant(f"{ns}-x", "g-shared", subject=agent("eve")))  # other ns
    finally:
        await drop_namespace(redis, ns)
        await drop_namespace(redis, f"{ns}-x")


async def test_revocations_are_retained_and_read_live(redis: Redis, ns: str) -> None:
    store = RedisGrantStore(redis)
    port: GrantRevocationSource = store
    at = timestamp_ms("2026-03-01T00:00:00Z")
    try:
        await store.put(make_grant(ns, "g-1"))
        await store.put(make_grant(ns, "g-2"))
        before = await port.check(ns, ["g-1", "g-2", "g-none"], at)
        assert before.revoked == frozenset()
        assert await store.revoke(ns, agent("bob"), "g-1", "2026-03-01T00:00:00Z")
        after = await port.check(ns, ["g-1", "g-2"], at)
        assert after.revoked == {"g-1"} and after.revision != before.revision
        assert (await port.check(ns, ["g-1"], at - 1)).revoked == frozenset()  # not yet
        with pytest.raises(ConfigurationError):  # a revoked id is never issued again
            await store.put(make_grant(ns, "g-1"))
    finally:
        await drop_namespace(redis, ns)


async def test_a_chain_is_read_by_id_in_one_script(redis: Redis, ns: str) -> None:
    store = RedisGrantStore(redis)
    port: DelegationChainResolver = store
    root = make_grant(ns, "g-root", subject=agent("orchestrator"), issuer=human("olivia"),
                      constraints={"delegationDepth": 2})
    mid = make_grant(ns, "g-mid", subject=agent("host"), issuer=agent("orchestrator"),
                     parentGrantId="g-root", constraints={"delegationDepth": 1})
    leaf = make_grant(ns, "g-leaf", issuer=agent("host"), parentGrantId="g-mid")
    try:
        for grant in (root, mid, leaf):
            await store.put(grant)
        assert [g.id for g in await port.chain(ns, "g-leaf", 17)] == ["g-leaf", "g-mid", "g-root"]
        assert [g.id for g in await port.chain(ns, "g-leaf", 2)] == ["g-leaf", "g-mid"]
        assert await port.chain(ns, "g-unknown", 17) == []
        assert [g.id for g in await port.chain(f"{ns}-x", "g-leaf", 17)] == []
    finally:
        await drop_namespace(redis, ns)


async def test_grants_and_their_revocations_are_read_together(redis: Redis, ns: str) -> None:
    store = RedisGrantStore(redis)
    port: CheckedGrantSource = store
    at = timestamp_ms("2026-03-01T00:00:00Z")
    try:
        empty = await port.grants_checked(ns, agent("bob"), agent("host"), at)
        assert (empty.grants, empty.checked) == ([], frozenset())
        assert empty.revocations == RevocationCheck(revision="0", revoked=frozenset())
        await store.put(make_grant(ns, "g-2", issuedAt="2026-02-01T00:00:00Z"))
        await store.put(make_grant(ns, "g-1"))
        await store.put(make_grant(ns, "g-other-issuer", issuer=human("mallory")))
        await store.put(make_grant(ns, "g-alice", subject=agent("alice")))
        await store.revoke(ns, agent("bob"), "g-2", "2026-03-01T00:00:00Z")
        await store.revoke(ns, agent("alice"), "g-alice", "2026-01-01T00:00:00Z")
        keys = await namespace_keys(redis, ns)

        answer = await port.grants_checked(ns, agent("bob"), agent("host"), at)

        assert answer.grants == await store.grants_for(ns, agent("bob"), agent("host"))
        assert answer.checked == {"g-1", "g-2", "g-other-issuer"}  # every grant of bob's
        assert answer.revocations == await store.check(ns, sorted(answer.checked), at)
        assert answer.revocations.revoked == {"g-2"} and answer.revocations.revision == "2"
        early = await port.grants_checked(ns, agent("bob"), agent("host"), at - 1)
        assert early.revocations.revoked == frozenset()  # revoked from ``at`` on: not yet
        assert await namespace_keys(redis, ns) == keys  # a read: nothing written
    finally:
        await drop_namespace(redis, ns)


async def test_the_combined_read_of_an_unreachable_server_is_store_unavailable(
    ns: str
) -> None:
    down = Redis(host="127.0.0.1", port=1, socket_connect_timeout=1)
    try:
        with pytest.raises(StoreUnavailable):
            await RedisGrantStore(down).grants_checked(ns, agent("bob"), agent("host"), 0)
    finally:
        await down.aclose()


async def test_the_kernel_reads_grants_and_revocations_once_then_revocation_fresh(
    redis: Redis, ns: str
) -> None:
    store = RedisGrantStore(redis)
    audit = InMemoryAuditSink()
    authorizer = CapabilityAuthorizer(store, None, audit, revocations=store)
    requirement = CapabilityRequirement.from_wire({
        "resource": {"namespace": "sharedos.messaging", "path": ["agent", "alice"]},
        "action": "send"})
    try:
        await store.put(make_grant(ns))
        with authorizer.snapshot():
            assert (await authorizer.check(make_context(ns), requirement)).allowed
            await store.revoke(ns, agent("bob"), "g-1", "2026-01-01T00:00:00Z")
            denied = await authorizer.consume(make_context(ns), requirement)
        assert denied.reason_code == "no_matching_grant"  # the second decision read fresh
        assert [(e.metadata or {})["revocationChecks"] for e in audit.events] == [
            [{"checked": ["g-1"], "status": "checked", "revision": "0", "revoked": []}],
            [{"checked": ["g-1"], "status": "checked", "revision": "1", "revoked": ["g-1"]}]]
    finally:
        await drop_namespace(redis, ns)


async def test_the_combined_read_covers_any_number_of_grants(redis: Redis, ns: str) -> None:
    """Lua's unpack() is bounded: the script reads the revocations in chunks, in order."""
    keys = Keys(ns)
    wire = make_grant(ns).to_wire()
    ids = [f"g-{i:04d}" for i in range(2100)]
    revoked = {"g-0000", "g-0998", "g-0999", "g-1998", "g-1999", "g-2099"}
    try:
        await redis.hset(keys.grants("agent", "bob"), mapping={
            grant_id: json.dumps({**wire, "id": grant_id}) for grant_id in ids})
        await redis.hset(keys.revocations, mapping={"": 6, **dict.fromkeys(revoked, 5)})
        await redis.hset(keys.revocations, "g-0001", 7)  # revoked from a later instant
        answer = await RedisGrantStore(redis).grants_checked(ns, agent("bob"), agent("host"), 6)
        assert answer.checked == set(ids) and len(answer.grants) == 2100
        assert answer.revocations == RevocationCheck(revision="6", revoked=frozenset(revoked))
    finally:
        await drop_namespace(redis, ns)
