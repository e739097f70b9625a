"""CapabilityAuthorizer: SPEC §2 steps 1-7, from the attacker's side where it matters."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import anyio
import pytest

from sharedos_redis.errors import StoreUnavailable
from sharedos_redis.kernel.authorizer import CapabilityAuthorizer
from sharedos_redis.kernel.contracts import (
    AccessContext,
    Address,
    AuditEvent,
    Capability,
    CapabilityConstraints,
    CapabilityGrant,
    CapabilityRequirement,
    ResourceRef,
    agent,
    human,
)
from sharedos_redis.kernel.matching import MAX_GRANTS
from sharedos_redis.kernel.memory import (
    InMemoryAuditSink,
    InMemoryGrantSource,
    InMemoryGrantUsageStore,
)
from sharedos_redis.kernel.ports import AuditSink, GrantSource, GrantUsageStore

pytestmark = pytest.mark.anyio

NS = "acme"
NOW = "2026-10-04T09:00:00.000Z"
ACTOR = agent("bob")
AUTHORITY = human("carol")
OWNER = human("olga")


def context(**changes: Any) -> AccessContext:
    fields: dict[str, Any] = {
        "namespace_id": NS, "actor": ACTOR, "authority": AUTHORITY, "owner": OWNER,
        "purpose": "atlas-status", "trace_id": "t-1", "enabled_tool_namespaces": ("messages",),
        "now": NOW,
    }
    return AccessContext(**(fields | changes))


def capability(
    namespace: str = "files",
    path: Sequence[str] = ("x",),
    actions: Sequence[str] = ("read",),
    scope: str = "descendants",
    owner: Address | None = None,
) -> Capability:
    resource = ResourceRef(namespace=namespace, path=tuple(path), owner=owner)
    return Capability(resource=resource, actions=tuple(actions), scope=scope)  # type: ignore[arg-type]  # str scope checked at runtime


def grant(
    grant_id: str = "g-1",
    capabilities: Sequence[Capability] | None = None,
    *,
    issued_at: str = "2026-10-01T00:00:00Z",
    revoked_at: str | None = None,
    parent_grant_id: str | None = None,
    namespace_id: str = NS,
    subject: Address = ACTOR,
    issuer: Address = AUTHORITY,
    **constraints: Any,
) -> CapabilityGrant:
    return CapabilityGrant(
        id=grant_id, namespace_id=namespace_id, subject=subject, issuer=issuer,
        capabilities=tuple(capabilities or (capability(),)),
        constraints=CapabilityConstraints(**constraints), issued_at=issued_at,
        revoked_at=revoked_at, parent_grant_id=parent_grant_id,
    )


def need(
    namespace: str = "files", path: Sequence[str] = ("x",), action: str = "read",
    owner: Address | None = None,
) -> CapabilityRequirement:
    return CapabilityRequirement(
        resource=ResourceRef(namespace=namespace, path=tuple(path), owner=owner), action=action
    )


class FixedSource:
    """A grant source that answers the same thing whoever asks (like a buggy host)."""

    def __init__(self, answer: object) -> None:
        self.answer = answer

    async def grants_for(
        self, namespace_id: str, actor: Address, authority: Address, /
    ) -> Sequence[CapabilityGrant]:
        if isinstance(self.answer, BaseException):
            raise self.answer
        return self.answer  # type: ignore[return-value]  # deliberately unchecked answers


class Setup:
    def __init__(self, *grants: CapabilityGrant, usage: bool = True,
                 source: GrantSource | None = None) -> None:
        self.source = InMemoryGrantSource(grants)
        self.usage = InMemoryGrantUsageStore() if usage else None
        self.audit = InMemoryAuditSink()
        grants_port: GrantSource = source or self.source
        usage_port: GrantUsageStore | None = self.usage
        audit_port: AuditSink = self.audit
        self.authz = CapabilityAuthorizer(grants_port, usage_port, audit_port)

    @property
    def last(self) -> AuditEvent:
        return self.audit.events[-1]


async def reason(setup: Setup, requirement: CapabilityRequirement | None = None,
                 ctx: AccessContext | None = None) -> str:
    decision = await setup.authz.check(ctx or context(), requirement or need())
    return decision.reason_code


# --- allowed, and the audit record ------------------------------------------------------


async def test_allowed_names_the_matched_grant_and_is_audited() -> None:
    s = Setup(grant("g-1"))
    decision = await s.authz.check(context(), need(path=("x", "y")), operation_id="op-1")
    assert decision.allowed and decision.reason_code == "allowed"
    assert decision.matched_grant_id == "g-1"
    [event] = s.audit.events
    assert event.type == "authorization.checked" and event.outcome == "allowed"
    assert (event.reason, event.grant_id, event.operation_id) == ("allowed", "g-1", "op-1")
    assert event.resource == need(path=("x", "y")).resource and event.action == "read"
    assert event.consumed is False and event.at == NOW
    assert (event.actor, event.authority, event.owner) == (ACTOR, AUTHORITY, OWNER)


async def test_no_grants_is_no_matching_grant_and_is_audited_denied() -> None:
    s = Setup()
    decision = await s.authz.consume(context(), need())
    assert not decision.allowed and decision.reason_code == "no_matching_grant"
    assert decision.matched_grant_id is None
    assert s.last.outcome == "denied" and s.last.reason == "no_matching_grant"


async def test_first_eligible_grant_in_order_wins() -> None:
    s = Setup(grant("g-1", purposes=("other",)), grant("g-2"), grant("g-3"))
    assert (await s.authz.check(context(), need())).matched_grant_id == "g-2"


# --- window and purpose -----------------------------------------------------------------


async def test_purpose_must_be_listed_exactly() -> None:
    assert await reason(Setup(grant(purposes=("a", "atlas-status")))) == "allowed"
    assert await reason(Setup(grant(purposes=("atlas-status-2", "Atlas-status")))) == (
        "no_matching_grant"
    )


@pytest.mark.parametrize(
    ("expires_at", "expected"),
    [
        ("2026-10-04T09:00:00.000Z", "no_matching_grant"),  # expiry exactly at now
        ("2026-10-04T11:00:00+02:00", "no_matching_grant"),  # the same instant, other offset
        ("2026-10-04T09:00:00.0009Z", "no_matching_grant"),  # sub-ms: compared at ms
        ("2026-10-04T09:00:00.001Z", "allowed"),
        ("2026-10-04T08:59:59.999Z", "no_matching_grant"),
    ],
)
async def test_expiry_at_now_is_expired(expires_at: str, expected: str) -> None:
    assert await reason(Setup(grant(expires_at=expires_at))) == expected


@pytest.mark.parametrize(
    ("not_before", "expected"),
    [("2026-10-04T09:00:00.001Z", "no_matching_grant"), (NOW, "allowed"),
     ("2026-10-04T09:00+0000", "allowed")],
)
async def test_not_before(not_before: str, expected: str) -> None:
    assert await reason(Setup(grant(not_before=not_before))) == expected


async def test_issued_in_the_future_is_inactive() -> None:
    assert await reason(Setup(grant(issued_at="2026-10-04T09:00:00.001Z"))) == "no_matching_grant"
    assert await reason(Setup(grant(issued_at=NOW))) == "allowed"


async def test_revoked_at_now_is_revoked() -> None:
    assert await reason(Setup(grant(revoked_at=NOW))) == "no_matching_grant"
    assert await reason(Setup(grant(revoked_at="2026-10-04T09:00:00.001Z"))) == "allowed"


async def test_revoke_through_the_source_applies_from_its_instant() -> None:
    s = Setup(grant("g-1"))
    assert s.source.revoke(NS, "g-1", "2026-10-04T10:00:00Z")
    assert await reason(s) == "allowed"
    assert await reason(s, ctx=context(now="2026-10-04T10:00:00Z")) == "no_matching_grant"
    assert s.source.revoke(NS, "g-1", "2026-10-04T12:00:00Z")  # a later revoke never extends
    assert await reason(s, ctx=context(now="2026-10-04T11:00:00Z")) == "no_matching_grant"
    assert not s.source.revoke(NS, "missing", NOW)


# --- capability cover -------------------------------------------------------------------


async def test_wrong_owner_is_not_covered() -> None:
    other = human("mallory")
    assert await reason(Setup(grant(capabilities=[capability(owner=other)]))) == (
        "no_matching_grant"
    )
    assert await reason(Setup(grant(capabilities=[capability(owner=OWNER)]))) == "allowed"
    # a missing owner on the request means context.owner, on either side
    assert await reason(Setup(grant()), need(owner=OWNER)) == "allowed"


async def test_descendants_cover_whole_segments_only() -> None:
    s = Setup(grant(capabilities=[capability(path=("x",), scope="descendants")]))
    assert await reason(s, need(path=("x-secret",))) == "no_matching_grant"
    assert await reason(s, need(path=("xy", "x"))) == "no_matching_grant"
    assert await reason(s, need(path=())) == "no_matching_grant"
    assert await reason(s, need(path=("x",))) == "allowed"
    assert await reason(s, need(path=("x", "y"))) == "allowed"
    assert await reason(s, need(path=("x", "y", "z"))) == "allowed"


async def test_exact_covers_only_the_equal_path() -> None:
    s = Setup(grant(capabilities=[capability(path=("x", "y"), scope="exact")]))
    assert await reason(s, need(path=("x", "y"))) == "allowed"
    assert await reason(s, need(path=("x", "y", "z"))) == "no_matching_grant"
    assert await reason(s, need(path=("x",))) == "no_matching_grant"


async def test_namespace_must_be_equal() -> None:
    s = Setup(grant(capabilities=[capability(namespace="files")]))
    assert await reason(s, need(namespace="files2")) == "no_matching_grant"


async def test_star_in_the_grant_covers_every_action() -> None:
    s = Setup(grant(capabilities=[capability(actions=("*",))]))
    assert await reason(s, need(action="delete")) == "allowed"
    assert await reason(s, need(action="*")) == "allowed"


async def test_star_in_the_request_needs_a_star_in_the_grant() -> None:
    s = Setup(grant(capabilities=[capability(actions=("read", "write", "delete"))]))
    assert await reason(s, need(action="*")) == "no_matching_grant"


async def test_no_cross_product_between_grants() -> None:
    s = Setup(
        grant("g-a", [capability(path=("a",), actions=("read",))]),
        grant("g-b", [capability(path=("b",), actions=("write",))]),
    )
    assert await reason(s, need(path=("b",), action="read")) == "no_matching_grant"
    assert await reason(s, need(path=("a",), action="write")) == "no_matching_grant"
    assert (await s.authz.check(context(), need(path=("b",), action="write"))).matched_grant_id \
        == "g-b"


async def test_no_cross_product_between_capabilities_of_one_grant() -> None:
    s = Setup(grant("g-1", [capability(path=("a",), actions=("read",)),
                            capability(path=("b",), actions=("write",), scope="exact")]))
    assert await reason(s, need(path=("b",), action="read")) == "no_matching_grant"
    assert await reason(s, need(path=("a", "b"), action="write")) == "no_matching_grant"


async def test_no_cross_product_of_purpose_and_window_between_grants() -> None:
    # g-1 has the purpose but is expired; g-2 is active for another purpose only.
    s = Setup(grant("g-1", expires_at="2026-10-04T08:00:00Z"),
              grant("g-2", purposes=("billing",)))
    assert await reason(s) == "no_matching_grant"


# --- the grant set is refused whole ----------------------------------------------------


@pytest.mark.parametrize(
    ("bad", "cause"),
    [
        (grant("g-x", subject=agent("mallory")), "grant_out_of_scope"),
        (grant("g-x", issuer=human("mallory")), "grant_out_of_scope"),
        (grant("g-x", namespace_id="other"), "grant_out_of_scope"),
        ({"id": "g-x"}, "grant_invalid"),
        (None, "grant_invalid"),
        (CapabilityGrant.model_construct(**(grant("g-x").__dict__ | {"issued_at": "yesterday"})),
         "grant_invalid"),
        (CapabilityGrant.model_construct(**(grant("g-x").__dict__ | {"id": ""})),
         "grant_invalid"),
    ],
)
async def test_one_bad_grant_refuses_the_whole_set(bad: object, cause: str) -> None:
    # The good grant comes first and alone would allow: the set is refused anyway.
    s = Setup(source=FixedSource([grant("g-1"), bad]))
    decision = await s.authz.check(context(), need())
    assert not decision.allowed and decision.reason_code == "authority_unavailable"
    assert s.last.fail_closed is True and s.last.cause == cause


@pytest.mark.parametrize(
    ("answer", "cause"),
    [
        (StoreUnavailable("grants_for", "down"), "grant_source_failed"),
        (KeyError("boom"), "grant_source_failed"),
        (None, "grant_set_invalid"),
        ("g-1", "grant_set_invalid"),
        ([grant(f"g-{i}") for i in range(MAX_GRANTS + 1)], "too_many_grants"),
    ],
)
async def test_failing_source_is_authority_unavailable(answer: object, cause: str) -> None:
    s = Setup(source=FixedSource(answer))
    assert await reason(s) == "authority_unavailable"
    assert s.last.fail_closed is True and s.last.cause == cause


async def test_exactly_max_grants_is_accepted() -> None:
    grants = [grant(f"g-{i}", purposes=("other",)) for i in range(MAX_GRANTS - 1)]
    s = Setup(source=FixedSource([*grants, grant("g-last")]))
    assert (await s.authz.check(context(), need())).matched_grant_id == "g-last"


async def test_in_memory_source_failure_is_authority_unavailable() -> None:
    s = Setup(grant())
    s.source.fail = True
    assert await reason(s) == "authority_unavailable"


async def test_grants_of_another_actor_or_authority_never_apply() -> None:
    s = Setup(grant("g-m", subject=agent("mallory")), grant("g-i", issuer=human("ivan")))
    assert await reason(s) == "no_matching_grant"
    assert await reason(s, ctx=context(actor=agent("mallory"))) == "allowed"


# --- maxUses ---------------------------------------------------------------------------


async def test_discovery_never_consumes() -> None:
    s = Setup(grant("g-1", max_uses=1))
    for _ in range(5):
        assert (await s.authz.check(context(), need())).allowed
    assert s.usage is not None and await s.usage.used(NS, "g-1") == 0
    assert all(event.consumed is False for event in s.audit.events)


async def test_consume_spends_exactly_one_then_the_grant_is_exhausted() -> None:
    s = Setup(grant("g-1", max_uses=2))
    assert s.usage is not None
    first = await s.authz.consume(context(), need())
    assert first.allowed and first.matched_grant_id == "g-1" and s.last.consumed is True
    assert await s.usage.used(NS, "g-1") == 1
    assert (await s.authz.consume(context(), need())).allowed
    exhausted = await s.authz.consume(context(), need())
    assert exhausted.reason_code == "grant_exhausted" and s.last.consumed is False
    assert await s.usage.used(NS, "g-1") == 2
    assert (await s.authz.check(context(), need())).reason_code == "grant_exhausted"


async def test_consume_without_max_uses_spends_nothing() -> None:
    s = Setup(grant("g-1"))
    assert (await s.authz.consume(context(), need())).allowed
    assert s.last.consumed is False
    assert s.usage is not None and await s.usage.used(NS, "g-1") == 0


async def test_next_eligible_grant_is_used_after_one_is_exhausted() -> None:
    s = Setup(grant("g-1", max_uses=1), grant("g-2", max_uses=1))
    ids = [(await s.authz.consume(context(), need())).matched_grant_id for _ in range(2)]
    assert ids == ["g-1", "g-2"]
    assert (await s.authz.consume(context(), need())).reason_code == "grant_exhausted"


async def test_exhausted_grant_does_not_hide_a_later_unlimited_one() -> None:
    s = Setup(grant("g-1", max_uses=1), grant("g-2"))
    await s.authz.consume(context(), need())
    assert (await s.authz.check(context(), need())).matched_grant_id == "g-2"


async def test_concurrent_consumers_get_exactly_max_uses() -> None:
    s = Setup(grant("g-1", max_uses=10))
    results: list[bool] = []

    async def consumer() -> None:
        results.append((await s.authz.consume(context(), need())).allowed)

    with anyio.fail_after(10):
        async with anyio.create_task_group() as tg:
            for _ in range(100):
                tg.start_soon(consumer)
    assert len(results) == 100 and results.count(True) == 10
    assert s.usage is not None and await s.usage.used(NS, "g-1") == 10
    assert sum(event.consumed is True for event in s.audit.events) == 10
    assert sum(event.reason == "grant_exhausted" for event in s.audit.events) == 90


async def test_no_usage_store_fails_closed_for_max_uses_grants_only() -> None:
    s = Setup(grant("g-1", max_uses=5), usage=False)
    for decide in (s.authz.check, s.authz.consume):
        decision = await decide(context(), need())
        assert decision.reason_code == "usage_store_unavailable" and not decision.allowed
        assert s.last.fail_closed is True and s.last.grant_id == "g-1"
    assert await reason(Setup(grant("g-1"), usage=False)) == "allowed"


async def test_no_usage_store_stops_the_walk() -> None:
    # Fail closed at once, even though a later grant without maxUses would allow.
    s = Setup(grant("g-1", max_uses=5), grant("g-2"), usage=False)
    assert await reason(s) == "usage_store_unavailable"


async def test_failing_usage_store_is_usage_store_unavailable() -> None:
    s = Setup(grant("g-1", max_uses=5))
    assert s.usage is not None
    s.usage.fail = True
    assert (await s.authz.consume(context(), need())).reason_code == "usage_store_unavailable"
    assert await reason(s) == "usage_store_unavailable"
    s.usage.fail = False
    assert await s.usage.used(NS, "g-1") == 0


# --- audit -----------------------------------------------------------------------------


async def test_every_decision_is_audited_once() -> None:
    s = Setup(grant("g-1", max_uses=1))
    await s.authz.check(context(), need())
    await s.authz.consume(context(), need())
    await s.authz.consume(context(), need())
    await s.authz.check(context(), need(path=("nope",)))
    reasons = [(e.reason, e.metadata) for e in s.audit.events]
    assert reasons == [("allowed", {"mode": "check"}),
                       ("allowed", {"mode": "consume", "usageState": "reserved"}),
                       ("grant_exhausted", {"mode": "consume"}),
                       ("no_matching_grant", {"mode": "check"})]


async def test_audit_failure_denies_check_and_consume() -> None:
    s = Setup(grant("g-1"))
    s.audit.fail = True
    for decide in (s.authz.check, s.authz.consume):
        decision = await decide(context(), need())
        assert not decision.allowed and decision.reason_code == "audit_unavailable"
        assert decision.matched_grant_id is None
    assert s.audit.events == []


async def test_audit_failure_on_consume_spends_the_use_without_refund() -> None:
    """Documented ordering: consume, then audit; a failed record keeps the use spent."""
    s = Setup(grant("g-1", max_uses=1))
    assert s.usage is not None
    s.audit.fail = True
    assert (await s.authz.consume(context(), need())).reason_code == "audit_unavailable"
    assert await s.usage.used(NS, "g-1") == 1
    s.audit.fail = False
    assert (await s.authz.consume(context(), need())).reason_code == "grant_exhausted"


async def test_audit_failure_on_check_spends_nothing() -> None:
    s = Setup(grant("g-1", max_uses=1))
    assert s.usage is not None
    s.audit.fail = True
    assert (await s.authz.check(context(), need())).reason_code == "audit_unavailable"
    assert await s.usage.used(NS, "g-1") == 0


class RaisingSink:
    async def record(self, event: AuditEvent, /) -> None:
        raise OSError("disk full")


async def test_any_audit_sink_exception_is_audit_unavailable() -> None:
    authz = CapabilityAuthorizer(InMemoryGrantSource([grant()]), None, RaisingSink())
    assert (await authz.consume(context(), need())).reason_code == "audit_unavailable"


# --- malformed context and request ---------------------------------------------------


def constructed_context(**changes: Any) -> AccessContext:
    return AccessContext.model_construct(**(context().__dict__ | changes))


@pytest.mark.parametrize(
    "changes",
    [{"purpose": ""}, {"purpose": "   "}, {"trace_id": ""}, {"now": "not-a-time"},
     {"now": "2026-02-30T00:00:00Z"}, {"namespace_id": ""}],
)
async def test_invalid_context(changes: dict[str, Any]) -> None:
    s = Setup(grant())
    decision = await s.authz.consume(constructed_context(**changes), need())
    assert not decision.allowed and decision.reason_code == "invalid_context"
    for event in s.audit.events:  # recorded only when it can be attributed validly
        assert event.reason == "invalid_context" and event.outcome == "denied"


async def test_invalid_now_is_audited_at_the_wall_clock() -> None:
    s = Setup(grant())
    await s.authz.check(constructed_context(now="yesterday"), need())
    [event] = s.audit.events
    assert event.reason == "invalid_context" and event.at != "yesterday"
    assert event.resource is None


async def test_resource_owner_other_than_context_owner_is_invalid_request() -> None:
    s = Setup(grant(capabilities=[capability(owner=human("mallory"))]))
    decision = await s.authz.consume(context(), need(owner=human("mallory")))
    assert decision.reason_code == "invalid_request"
    assert s.last.reason == "invalid_request"


async def test_malformed_requirement_is_invalid_request() -> None:
    s = Setup(grant(capabilities=[capability(actions=("*",))]))
    bad_action = CapabilityRequirement.model_construct(resource=need().resource, action="")
    bad_path = CapabilityRequirement.model_construct(
        resource=ResourceRef.model_construct(namespace="files", path=("x", ".."), owner=None),
        action="read",
    )
    bad_namespace = CapabilityRequirement.model_construct(
        resource=ResourceRef.model_construct(namespace="", path=("x",), owner=None),
        action="read",
    )
    for bad in (bad_action, bad_path, bad_namespace):
        assert await reason(s, bad) == "invalid_request"
        assert s.last.resource is None  # nothing malformed reaches the audit record


# --- delegation (later) and can_reach --------------------------------------------------


async def test_delegated_grant_is_skipped_as_unverified() -> None:
    s = Setup(grant("g-d", parent_grant_id="g-parent"))
    decision = await s.authz.check(context(), need())
    assert decision.reason_code == "delegation_chain_unverified" and not decision.allowed
    s2 = Setup(grant("g-d", parent_grant_id="g-parent"), grant("g-2"))
    assert (await s2.authz.check(context(), need())).matched_grant_id == "g-2"
    assert await reason(Setup(grant("g-d", parent_grant_id="g-p"), grant("g-e", max_uses=1)),
                        need(path=("nope",))) == "no_matching_grant"


async def test_can_reach() -> None:
    messaging = capability(namespace="sharedos.messaging", path=("agent", "alice"),
                           actions=("send",), scope="exact")
    s = Setup(grant("g-1", [messaging], max_uses=1, purposes=("atlas-status",)))
    assert await s.authz.can_reach(context(), "sharedos.messaging", "send")
    assert not await s.authz.can_reach(context(), "sharedos.messaging", "receive")
    assert not await s.authz.can_reach(context(), "sharedos.execution", "send")
    assert not await s.authz.can_reach(context(purpose="other"), "sharedos.messaging", "send")
    assert s.audit.events == [] and s.usage is not None
    assert await s.usage.used(NS, "g-1") == 0
    await s.authz.consume(context(), need("sharedos.messaging", ("agent", "alice"), "send"))
    assert not await s.authz.can_reach(context(), "sharedos.messaging", "send")


async def test_can_reach_fails_closed() -> None:
    star = capability(namespace="sharedos.messaging", actions=("*",))
    other_owner = capability(namespace="sharedos.messaging", actions=("send",),
                             owner=human("mallory"))
    assert await Setup(grant("g", [star])).authz.can_reach(context(), "sharedos.messaging", "x")
    assert not await Setup(grant("g", [other_owner])).authz.can_reach(
        context(), "sharedos.messaging", "send")
    assert not await Setup(grant("g", [star], max_uses=1), usage=False).authz.can_reach(
        context(), "sharedos.messaging", "send")
    assert not await Setup(source=FixedSource(OSError())).authz.can_reach(
        context(), "sharedos.messaging", "send")
    assert not await Setup(grant("g", [star])).authz.can_reach(
        constructed_context(purpose=""), "sharedos.messaging", "send")
    assert not await Setup(grant("g", [star], parent_grant_id="p")).authz.can_reach(
        context(), "sharedos.messaging", "send")
