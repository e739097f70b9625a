"""Delegated grant chains (SharedOS ADR 0008): every link checked, from the attacker's side."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from sharedos_redis.kernel.contracts import (
    Address,
    CapabilityGrant,
    CapabilityRequirement,
    agent,
    format_timestamp,
    human,
    timestamp_ms,
)
from sharedos_redis.kernel.delegation import MAX_DELEGATION_LINKS, chain_problem
from tests.kernel.kernel_world import (
    ALICE,
    AUTHORITY,
    NOW,
    NS,
    T0,
    World,
    context,
    make_world,
)

pytestmark = pytest.mark.anyio

ROOT = human("olivia")
READ = {"resource": {"namespace": "files", "path": ["workspace"]}, "actions": ["read"],
        "scope": "descendants"}


def link(grant_id: str, issuer: Address, subject: Address, parent: str | None = None, *,
         capabilities: list[dict[str, Any]] | None = None, hours_ago: float = 1,
         revoked_at: str | None = None, **constraints: Any) -> CapabilityGrant:
    wire: dict[str, Any] = {
        "id": grant_id, "namespaceId": NS, "subject": subject.to_wire(),
        "issuer": issuer.to_wire(), "capabilities": capabilities or [READ],
        "constraints": constraints,
        "issuedAt": format_timestamp(T0 - timedelta(hours=hours_ago))}
    if parent is not None:
        wire["parentGrantId"] = parent
    if revoked_at is not None:
        wire["revokedAt"] = revoked_at
    return CapabilityGrant.from_wire(wire)


def parent(revoked_at: str | None = None, **constraints: Any) -> CapabilityGrant:
    """The delegator's own grant: olivia → the acting authority, delegable twice."""
    return link("g-parent", ROOT, AUTHORITY, hours_ago=2, revoked_at=revoked_at,
                **{"delegationDepth": 2, **constraints})


def child(**changes: Any) -> CapabilityGrant:
    """The authority's delegation to alice (what alice presents)."""
    return link("g-child", AUTHORITY, ALICE, "g-parent", **changes)


def need(path: tuple[str, ...] = ("workspace", "a"), action: str = "read") -> Any:
    return CapabilityRequirement.from_wire({
        "resource": {"namespace": "files", "path": list(path)}, "action": action})


async def decide(world: World, action: str = "read") -> tuple[str, str | None]:
    decision = await world.kernel.authorizer.consume(context(ALICE), need(action=action))
    [record] = world.audit_of("authorization.checked")[-1:]
    return decision.reason_code, record.cause


async def test_a_valid_chain_allows_the_leaf() -> None:
    world = make_world(parent(), child(), chains=True)
    decision = await world.kernel.authorizer.consume(context(ALICE), need())
    assert decision.allowed and decision.matched_grant_id == "g-child"


@pytest.mark.parametrize(("grants", "cause"), [
    ((parent(), child(capabilities=[{**READ, "actions": ["read", "write"]}])),
     "capability_widened"),
    ((parent(), child(capabilities=[{**READ, "resource": {"namespace": "files",
                                                          "path": []}}])),
     "capability_widened"),
    ((parent(revoked_at=format_timestamp(T0 - timedelta(minutes=5))), child()),
     "parent_inactive"),
    ((parent(expiresAt=format_timestamp(T0)), child()), "parent_inactive"),  # checked first
    ((parent(purposes=["other"]), child()), "parent_inactive"),
    ((parent(maxUses=3), child()), "bounded_parent_not_delegable"),
    ((parent(delegationDepth=0), child()), "delegation_not_permitted"),
    ((link("g-parent", ROOT, AUTHORITY, hours_ago=2), child()), "delegation_not_permitted"),
    ((parent(delegationDepth=1), child(delegationDepth=1)), "delegation_depth_exceeded"),
    ((parent(), child(hours_ago=3)), "constraints_widened"),  # issued before its parent
    ((parent(expiresAt=format_timestamp(T0 + timedelta(hours=1))), child()),
     "constraints_widened"),  # an omitted expiry widens
    ((parent(purposes=["atlas-status"]), child()), "constraints_widened"),
    ((link("g-parent", ROOT, agent("mallory"), hours_ago=2, delegationDepth=2), child()),
     "issuer_not_parent_subject"),
])
async def test_a_broken_link_makes_the_chain_invalid(grants: tuple[CapabilityGrant, ...],
                                                     cause: str) -> None:
    world = make_world(*grants, chains=True)
    assert await decide(world) == ("delegation_chain_invalid", cause)


async def test_a_chain_that_widens_at_link_three_is_invalid() -> None:
    root = link("g-0", ROOT, agent("a1"), hours_ago=5, delegationDepth=4)
    one = link("g-1", agent("a1"), agent("a2"), "g-0", hours_ago=4, delegationDepth=3)
    two = link("g-2", agent("a2"), AUTHORITY, "g-1", hours_ago=3, delegationDepth=2,
               capabilities=[{**READ, "actions": ["read", "write"]}])  # link 3 widens
    leaf = link("g-3", AUTHORITY, ALICE, "g-2", hours_ago=2)
    world = make_world(root, one, two, leaf, chains=True)
    assert await decide(world) == ("delegation_chain_invalid", "capability_widened")
    problem = chain_problem(leaf, [two, one, root], context(ALICE), timestamp_ms(NOW))
    assert problem == ("capability_widened", "g-2")


def _long_chain(links: int) -> list[CapabilityGrant]:
    grants = [link("g-0", ROOT, agent("a0"), hours_ago=links + 1, delegationDepth=links)]
    for n in range(1, links + 1):
        subject = ALICE if n == links else (AUTHORITY if n == links - 1 else agent(f"a{n}"))
        grants.append(link(f"g-{n}", grants[-1].subject, subject, f"g-{n - 1}",
                           hours_ago=links + 1 - n, delegationDepth=links - n))
    return grants


@pytest.mark.parametrize(("links", "reason"), [
    (MAX_DELEGATION_LINKS, "allowed"), (MAX_DELEGATION_LINKS + 1, "delegation_chain_invalid")])
async def test_a_chain_has_at_most_sixteen_links(links: int, reason: str) -> None:
    world = make_world(*_long_chain(links), chains=True)
    assert (await decide(world))[0] == reason


async def test_a_cycle_is_invalid() -> None:
    loop = link("g-parent", ROOT, AUTHORITY, "g-child", hours_ago=2, delegationDepth=5)
    world = make_world(loop, child(), chains=True)
    assert await decide(world) == ("delegation_chain_invalid", "chain_cycle")


async def test_an_unverifiable_chain_is_reported_ahead_of_an_invalid_one() -> None:
    orphan = link("g-orphan", AUTHORITY, ALICE, "g-nowhere")
    widened = child(capabilities=[{**READ, "actions": ["*"]}])
    world = make_world(parent(), widened, orphan, chains=True)
    assert await decide(world) == ("delegation_chain_unverified", "parent_not_found")
    assert await decide(make_world(parent(), child())) == (
        "delegation_chain_unverified", "resolver_unavailable")
    failing = make_world(parent(), child(), chains=True)

    async def broken(*args: Any) -> Any:
        raise RuntimeError("resolver down")

    failing.grants.chain = broken  # type: ignore[method-assign]
    assert await decide(failing) == ("delegation_chain_unverified", "resolver_failed")


async def test_a_revoked_parent_is_seen_live_and_by_the_next_snapshot() -> None:
    world = make_world(parent(), child(), chains=True, live_revocation=True)
    assert (await decide(world))[0] == "allowed"
    world.grants.revoke(NS, "g-parent", T0 - timedelta(seconds=1))
    reason, _ = await decide(world)
    assert reason == "delegation_chain_invalid"  # the reloaded chain shows it revoked
    with world.kernel.authorizer.snapshot():
        snapshot = make_world(parent(), child(), chains=True, live_revocation=True)
        assert (await decide(snapshot))[0] == "allowed"
        snapshot.grants.revoke(NS, "g-parent", T0 - timedelta(seconds=1))
        record_count = len(snapshot.audit_of("authorization.checked"))
        assert (await decide(snapshot))[0] == "no_matching_grant"  # live: ancestor revoked
        checks = snapshot.audit_of("authorization.checked")[record_count].metadata
        assert checks is not None
        assert checks["revocationChecks"][-1]["revoked"] == ["g-parent"]
