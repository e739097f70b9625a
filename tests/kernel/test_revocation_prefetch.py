"""The revocation read that comes with a grant load (issue 11, SharedOS ADR 0027).

A source that is both the grant source and the live revocation source may answer the
grants and the revocation state of their ids in one read. That read serves the one
decision that loaded the grants, and only candidates whose whole chain it covers; every
other check, and every later decision of the snapshot, reads the source afresh.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import timedelta
from typing import Any

import pytest

from sharedos_redis.errors import StoreUnavailable
from sharedos_redis.kernel.authorizer import CapabilityAuthorizer
from sharedos_redis.kernel.contracts import (
    Address,
    CapabilityGrant,
    CapabilityRequirement,
    JsonValue,
    epoch_ms,
)
from sharedos_redis.kernel.kernel import Kernel
from sharedos_redis.kernel.memory import (
    InMemoryAuditSink,
    InMemoryGrantSource,
    InMemoryGrantUsageStore,
)
from sharedos_redis.kernel.ports import CheckedGrants, CheckedGrantSource, RevocationCheck
from sharedos_redis.kernel.testing import InMemoryRouter, InMemoryTransport

from .kernel_world import ALICE, BOB, NS, T0, context, send_grant, tool_call
from .test_delegation import child, need, parent

pytestmark = pytest.mark.anyio


class PrefetchingSource(InMemoryGrantSource):
    """The in-memory source plus the combined read, counting every read it answers."""

    def __init__(self, grants: Sequence[CapabilityGrant] = ()) -> None:
        super().__init__(grants)
        self.combined = 0
        self.checks: list[tuple[str, ...]] = []
        self.combined_fails = False
        self.forge: Any = None
        self.revoked_live: set[str] = set()  # revocations only the live state knows of

    async def check(self, namespace_id: str, grant_ids: Sequence[str],
                    at_ms: int) -> RevocationCheck:
        self.checks.append(tuple(grant_ids))
        return await self._read(namespace_id, grant_ids, at_ms)

    async def _read(self, namespace_id: str, grant_ids: Sequence[str],
                    at_ms: int) -> RevocationCheck:
        answer = await super().check(namespace_id, grant_ids, at_ms)
        return RevocationCheck(answer.revision,
                               answer.revoked | (self.revoked_live & set(grant_ids)))

    async def grants_checked(self, namespace_id: str, actor: Address, authority: Address,
                             at_ms: int) -> CheckedGrants:
        self.combined += 1
        if self.combined_fails:
            raise StoreUnavailable("grants.read", "unavailable (test switch)")
        grants = await super().grants_for(namespace_id, actor, authority)
        ids = frozenset(g.id for g in self._grants.get(namespace_id, {}).values()
                        if g.subject == actor)
        revocations = await self._read(namespace_id, sorted(ids), at_ms)
        if self.forge is not None:
            revocations = self.forge
        return CheckedGrants(grants=grants, checked=ids, revocations=revocations)


def authorizer(source: PrefetchingSource, *, live: bool = True,
               chains: bool = False) -> tuple[CapabilityAuthorizer, InMemoryAuditSink]:
    audit = InMemoryAuditSink()
    return CapabilityAuthorizer(source, InMemoryGrantUsageStore(), audit,
                                clock=lambda: T0, revocations=source if live else None,
                                chains=source if chains else None), audit


def send_to_alice() -> CapabilityRequirement:
    return CapabilityRequirement.from_wire({
        "resource": {"namespace": "sharedos.messaging", "path": ["agent", "alice"]},
        "action": "send"})


def checks_of(audit: InMemoryAuditSink) -> list[JsonValue]:
    return [(e.metadata or {}).get("revocationChecks") for e in audit.events
            if e.type == "authorization.checked"]


def test_the_redis_shaped_source_is_recognised() -> None:
    source = PrefetchingSource()
    assert isinstance(source, CheckedGrantSource)
    assert not isinstance(InMemoryGrantSource(), CheckedGrantSource)


async def test_the_read_serves_the_decision_that_loaded_the_grants_and_no_other() -> None:
    source = PrefetchingSource([send_grant("g-send", BOB, ALICE)])
    authz, audit = authorizer(source)
    with authz.snapshot():
        assert (await authz.check(context(BOB), send_to_alice())).allowed
        assert (source.combined, source.checks) == (1, [])  # one read for both
        assert (await authz.consume(context(BOB), send_to_alice())).allowed
        assert (await authz.consume(context(BOB), send_to_alice())).allowed
    assert source.combined == 1 and source.checks == [("g-send",), ("g-send",)]  # fresh
    entry = {"checked": ["g-send"], "status": "checked", "revision": "0", "revoked": []}
    assert checks_of(audit) == [[entry], [entry], [entry]]  # the same record either way


async def test_without_a_snapshot_each_decision_has_its_own_combined_read() -> None:
    source = PrefetchingSource([send_grant("g-send", BOB, ALICE)])
    authz, _ = authorizer(source)
    for _ in range(3):
        assert (await authz.consume(context(BOB), send_to_alice())).allowed
    assert (source.combined, source.checks) == (3, [])


async def test_a_revocation_after_the_combined_read_reaches_the_next_decision() -> None:
    source = PrefetchingSource([send_grant("g-send", BOB, ALICE)])
    authz, audit = authorizer(source)
    with authz.snapshot():
        assert (await authz.check(context(BOB), send_to_alice())).allowed
        source.revoke(NS, "g-send", T0 - timedelta(seconds=1))  # after the combined read
        denied = await authz.consume(context(BOB), send_to_alice())
    assert denied.reason_code == "no_matching_grant"
    assert source.checks == [("g-send",)]
    assert checks_of(audit)[-1] == [{"checked": ["g-send"], "status": "checked",
                                     "revision": "1", "revoked": ["g-send"]}]


async def test_a_revocation_in_the_combined_read_skips_the_candidate() -> None:
    source = PrefetchingSource([send_grant("g-send", BOB, ALICE)])
    source.revoked_live.add("g-send")
    authz, audit = authorizer(source)
    assert (await authz.consume(context(BOB), send_to_alice())).reason_code \
        == "no_matching_grant"
    assert source.combined == 1 and source.checks == []
    assert checks_of(audit) == [[{"checked": ["g-send"], "status": "checked",
                                  "revision": "0", "revoked": ["g-send"]}]]


async def test_the_requester_side_of_a_request_reads_twice_not_three_times() -> None:
    source = PrefetchingSource([send_grant("g-send", BOB, ALICE)])
    kernel = Kernel(grants=source, audit=InMemoryAuditSink(), usage=InMemoryGrantUsageStore(),
                    transport=InMemoryTransport(), router=InMemoryRouter(payload=1),
                    clock=lambda: T0, revocations=source)
    call = tool_call("messages.request", {"recipient": ALICE.to_wire(), "payload": 1})
    result = await kernel.invoke_tool(context(BOB), call)
    assert result.status == "succeeded"
    # discovery answers from the combined read; the send decision reads afresh
    assert (source.combined, source.checks) == (1, [("g-send",)])


async def test_a_chain_the_combined_read_does_not_cover_is_read_fresh() -> None:
    source = PrefetchingSource([parent(), child()])
    authz, audit = authorizer(source, chains=True)
    assert (await authz.consume(context(ALICE), need())).allowed
    # the combined read covered alice's grants only; her grant stands on the authority's
    assert source.combined == 1 and source.checks == [("g-child", "g-parent")]
    source.revoked_live.add("g-parent")  # seen only by a read that covers the parent
    assert (await authz.consume(context(ALICE), need())).reason_code == "no_matching_grant"
    assert source.combined == 2 and source.checks[-1] == ("g-child", "g-parent")
    assert checks_of(audit) == [
        [{"checked": ["g-child", "g-parent"], "status": "checked", "revision": "0",
          "revoked": []}],
        [{"checked": ["g-child", "g-parent"], "status": "checked", "revision": "0",
          "revoked": ["g-parent"]}]]


async def test_a_failed_combined_read_fails_closed_like_a_failed_grant_load() -> None:
    source = PrefetchingSource([send_grant("g-send", BOB, ALICE)])
    source.combined_fails = True
    authz, audit = authorizer(source)
    decision = await authz.consume(context(BOB), send_to_alice())
    assert decision.reason_code == "authority_unavailable"
    [record] = audit.events
    assert (record.fail_closed, record.cause) == (True, "grant_source_failed")
    assert source.checks == []
    assert not await authz.can_reach(context(BOB), "sharedos.messaging", "send")


@pytest.mark.parametrize("forged", [object(), "not a check",
                                    RevocationCheck(revision=7, revoked=frozenset())])  # type: ignore[arg-type]  # a malformed answer on purpose
async def test_a_malformed_prefetched_read_fails_closed_like_a_malformed_check(
        forged: Any) -> None:
    source = PrefetchingSource([send_grant("g-send", BOB, ALICE)])
    source.forge = forged
    authz, audit = authorizer(source)
    decision = await authz.consume(context(BOB), send_to_alice())
    assert decision.reason_code == "authority_unavailable"
    [record] = audit.events
    assert (record.fail_closed, record.cause) == (True, "revocation_source_failed")
    assert (record.metadata or {})["revocationChecks"] == [
        {"checked": ["g-send"], "status": "unavailable"}]
    assert not await authz.can_reach(context(BOB), "sharedos.messaging", "send")


async def test_no_combined_read_without_live_revocation_or_from_another_source() -> None:
    source = PrefetchingSource([send_grant("g-send", BOB, ALICE)])
    authz, _ = authorizer(source, live=False)
    assert (await authz.consume(context(BOB), send_to_alice())).allowed
    other = PrefetchingSource([send_grant("g-send", BOB, ALICE)])
    split = CapabilityAuthorizer(source, None, InMemoryAuditSink(), revocations=other)
    assert (await split.check(context(BOB), send_to_alice())).allowed
    assert source.combined == 0 and other.combined == 0 and other.checks == [("g-send",)]


async def test_the_combined_read_is_asked_at_the_operation_instant() -> None:
    seen: list[int] = []
    source = PrefetchingSource([send_grant("g-send", BOB, ALICE)])
    inner = source.grants_checked

    async def spy(namespace_id: str, actor: Address, authority: Address,
                  at_ms: int) -> CheckedGrants:
        seen.append(at_ms)
        return await inner(namespace_id, actor, authority, at_ms)

    source.grants_checked = spy  # type: ignore[method-assign]
    later = T0 + timedelta(minutes=5)
    authz = CapabilityAuthorizer(source, None, InMemoryAuditSink(), clock=lambda: later,
                                 revocations=source)
    assert (await authz.check(context(BOB), send_to_alice())).allowed
    assert seen == [epoch_ms(later)]


async def test_a_turn_admission_reads_once_and_the_turns_calls_read_fresh() -> None:
    from sharedos_redis.kernel.requirements import path_argument
    from sharedos_redis.kernel.turn import RuntimeHost, TurnExecutor, TurnRequest

    from .kernel_world import file_tool
    from .test_time_rules import ALICE_TURN, read_grant, request

    source = PrefetchingSource([ALICE_TURN, read_grant()])
    kernel = Kernel(grants=source, audit=InMemoryAuditSink(), usage=InMemoryGrantUsageStore(),
                    clock=lambda: T0, revocations=source)

    async def handler(ctx: Any, call: Any) -> JsonValue:
        return "text"

    kernel.register_tool(file_tool(path=("projects",)), handler, resolve=path_argument("path"))
    seen: list[tuple[int, int]] = []
    codes: list[str | None] = []

    class Runtime:
        async def run(self, turn: TurnRequest, host: RuntimeHost) -> JsonValue:
            seen.append((source.combined, len(source.checks)))
            first = await host.call("files.read", {"path": "atlas/a"})
            source.revoked_live.add("g-atlas")  # committed after the admission's read
            second = await host.call("files.read", {"path": "atlas/a"})
            codes.extend(getattr(r, "error", None) and r.error.code for r in (first, second))
            return None

    executor = TurnExecutor(kernel, Runtime(), clock=lambda: T0)
    await executor.execute(request())
    # admission answered from the combined read; the tool catalogue offered to the
    # runtime is a later decision of the turn, so it read afresh, as does every call
    assert seen == [(1, 1)] and source.combined == 1
    assert len(source.checks) >= 2 and all(ids == ("g-atlas",) for ids in source.checks)
    assert codes == [None, "tool_unavailable"]  # no grant reaches files.read any more
    await executor.execute(request())  # the next turn is its own snapshot: its own read
    assert source.combined == 2
