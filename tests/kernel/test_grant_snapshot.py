"""One grant set per operation (SharedOS resolves authority once), and the validated
fast path never trusts an instance that skipped validation."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from sharedos_redis.kernel.authorizer import CapabilityAuthorizer
from sharedos_redis.kernel.contracts import Address, CapabilityGrant, CapabilityRequirement
from sharedos_redis.kernel.memory import InMemoryAuditSink, InMemoryGrantSource

from .kernel_world import ALICE, BOB, NOW, context, make_world, send_grant, tool_call

pytestmark = pytest.mark.anyio


class CountingSource:
    def __init__(self, *grants: CapabilityGrant) -> None:
        self.inner = InMemoryGrantSource(grants)
        self.loads = 0

    async def grants_for(self, namespace_id: str, actor: Address,
                         authority: Address) -> Sequence[CapabilityGrant]:
        self.loads += 1
        return await self.inner.grants_for(namespace_id, actor, authority)


async def test_one_request_loads_the_grants_once_and_the_next_reloads() -> None:
    world = make_world(send_grant("g-send", BOB, ALICE))
    source = CountingSource(send_grant("g-send", BOB, ALICE))
    world.kernel.authorizer._grants = source  # count what the kernel asks its source
    call = tool_call("messages.request", {"recipient": ALICE.to_wire(), "payload": 1})
    first = await world.kernel.invoke_tool(context(BOB), call)
    assert first.status == "succeeded" and source.loads == 1  # discovery + consume
    source.inner.revoke("acme", "g-send", NOW)
    second = await world.kernel.invoke_tool(context(BOB), call)
    assert second.status == "denied" and source.loads == 2  # revocation seen next operation


async def test_unvalidated_copies_are_revalidated() -> None:
    authorizer = CapabilityAuthorizer(InMemoryGrantSource([send_grant("g", BOB, ALICE)]),
                                      None, InMemoryAuditSink())
    good = context(BOB)
    requirement = CapabilityRequirement.from_wire({
        "resource": {"namespace": "sharedos.messaging", "path": ["agent", "alice"]},
        "action": "send"})
    assert (await authorizer.check(good, requirement)).allowed
    forged = good.model_copy(update={"purpose": "   "})  # skips validation
    assert not forged.is_validated
    assert (await authorizer.check(forged, requirement)).reason_code == "invalid_context"
    sneaky = requirement.model_copy(update={"action": ""})
    assert (await authorizer.check(good, sneaky)).reason_code == "invalid_request"
    constructed = CapabilityRequirement.model_construct(**dict(requirement))
    assert not constructed.is_validated
    assert (await authorizer.check(good, constructed)).allowed  # valid content still works


def test_a_validated_object_never_hides_an_unvalidated_part() -> None:
    from pydantic import ValidationError

    from sharedos_redis.kernel.contracts import AgentAddress, MessageEnvelope

    hollow = AgentAddress.model_construct(kind="agent", agent_id="")
    with pytest.raises(ValidationError):
        MessageEnvelope(id="m", sender=hollow, receiver=ALICE, purpose="p", payload=None,
                        trace_id="t", created_at=NOW)
