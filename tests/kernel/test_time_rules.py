"""SharedOS time rules: authority at admission, expiry per operation, revocation, freshness."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

import pytest

from sharedos_redis.kernel.contracts import (
    CapabilityGrant,
    JsonValue,
    ToolCall,
    format_timestamp,
)
from sharedos_redis.kernel.requirements import path_argument
from sharedos_redis.kernel.turn import RuntimeHost, TurnExecutor, TurnRequest
from tests.kernel.kernel_world import (
    ALICE,
    NS,
    T0,
    TRACE,
    World,
    context,
    file_tool,
    grant,
    invoke_grant,
    make_world,
    tool_call,
)
from tests.kernel.test_turn import execution

pytestmark = pytest.mark.anyio

ALICE_TURN = invoke_grant("g-inv-alice", ALICE)
SCRATCH = grant("g-scratch", ALICE, "files", ["projects", "scratch"], ["read"],
                scope="descendants")
"""A second grant that keeps files.read visible, so a refused call shows the real code."""


class Clock:
    """A host clock the test moves by hand."""

    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> datetime:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += timedelta(seconds=seconds)


def read_grant(grant_id: str = "g-atlas", **constraints: Any) -> CapabilityGrant:
    wire = grant(grant_id, ALICE, "files", ["projects", "atlas"], ["read"],
                 scope="descendants").to_wire()
    return CapabilityGrant.from_wire({**wire, "constraints": constraints})


def files_world(*grants: CapabilityGrant, clock: Clock, live: bool = False) -> World:
    world = make_world(ALICE_TURN, SCRATCH, *grants, clock=clock, live_revocation=live)

    async def handler(ctx: Any, call: ToolCall) -> JsonValue:
        world.handled.append(call)
        return "text"

    world.kernel.register_tool(file_tool(path=("projects",)), handler,
                               resolve=path_argument("path"))
    return world


def executor(world: World, script: Any) -> TurnExecutor:
    class Runtime:
        async def run(self, turn: TurnRequest, host: RuntimeHost) -> JsonValue:
            return await script(turn, host)

    return TurnExecutor(world.kernel, Runtime(), clock=world.kernel.clock)


def request() -> Any:
    return execution(tools=(file_tool(path=("projects",)),))


async def test_a_grant_store_down_at_admission_denies_the_turn_before_the_runtime() -> None:
    clock = Clock()
    world = files_world(read_grant(), clock=clock)
    world.grants.fail = True
    started: list[str] = []

    async def script(turn: TurnRequest, host: RuntimeHost) -> JsonValue:
        started.append(turn.execution_id)
        return None

    result = await executor(world, script).execute(request())
    assert result.status == "denied" and result.error.code == "authority_unavailable"
    assert started == [] and [e.type for e in result.events] == ["turn.denied"]


async def test_a_grant_expiring_mid_turn_is_refused_from_the_next_call() -> None:
    clock = Clock()
    expires = format_timestamp(T0 + timedelta(seconds=1))
    world = files_world(read_grant(expiresAt=expires), clock=clock)
    codes: list[str | None] = []

    async def script(turn: TurnRequest, host: RuntimeHost) -> JsonValue:
        for _ in range(2):
            result = await host.call("files.read", {"path": "atlas/plan.md"})
            codes.append(getattr(result, "error", None) and result.error.code)
            clock.advance(2)  # the grant's window closes under the running turn
        return None

    result = await executor(world, script).execute(request())
    assert result.status == "succeeded"
    assert codes == [None, "no_matching_grant"]
    assert len(world.handled) == 1


async def test_a_clock_running_backwards_cannot_revive_an_expired_grant() -> None:
    clock = Clock()
    world = files_world(read_grant(expiresAt=format_timestamp(T0)), clock=clock)
    clock.advance(-60)  # the operation instant is before admission: admission wins
    result = await world.kernel.invoke_tool(context(ALICE), tool_call(
        "files.read", {"path": "atlas/x"}, requested_at=format_timestamp(clock.now)))
    assert result.status == "denied" and result.error.code == "no_matching_grant"


async def _two_turns(world: World, clock: Clock) -> list[str | None]:
    codes: list[str | None] = []

    async def script(turn: TurnRequest, host: RuntimeHost) -> JsonValue:
        first = await host.call("files.read", {"path": "atlas/a"})
        world.grants.revoke(NS, "g-atlas", clock.now)  # revoked while this turn runs
        clock.advance(1)
        second = await host.call("files.read", {"path": "atlas/a"})
        codes.extend(getattr(r, "error", None) and r.error.code for r in (first, second))
        return None

    await executor(world, script).execute(request())

    async def next_turn(turn: TurnRequest, host: RuntimeHost) -> JsonValue:
        result = await host.call("files.read", {"path": "atlas/a"})
        codes.append(getattr(result, "error", None) and result.error.code)
        return None

    clock.advance(1)
    ctx = context(ALICE, now=format_timestamp(clock.now))
    await executor(world, next_turn).execute(execution(tools=(file_tool(path=("projects",)),))
                                             .model_copy(update={"context": ctx}))
    return codes


async def test_revocation_reaches_the_next_turn_by_default() -> None:
    clock = Clock()
    world = files_world(read_grant(), clock=clock)
    assert await _two_turns(world, clock) == [None, None, "no_matching_grant"]


async def test_live_revocation_reaches_the_next_call_and_is_recorded() -> None:
    clock = Clock()
    world = files_world(read_grant(), clock=clock, live=True)
    assert await _two_turns(world, clock) == [None, "no_matching_grant", "no_matching_grant"]
    checks = [(e.metadata or {}).get("revocationChecks")
              for e in world.audit_of("authorization.checked")
              if e.resource is not None and e.resource.path[-1] == "a"
              and (e.metadata or {})["mode"] == "consume"]
    assert checks[0] == [{"checked": ["g-atlas"], "status": "checked", "revision": "0",
                          "revoked": []}]
    assert {"checked": ["g-atlas"], "status": "checked", "revision": "1",
            "revoked": ["g-atlas"]} in checks[1]


async def test_a_revoked_candidate_is_skipped_and_another_grant_still_allows() -> None:
    clock = Clock()
    world = files_world(read_grant(), read_grant("g-atlas-2"), clock=clock, live=True)
    world.grants.revoke(NS, "g-atlas", T0)
    result = await world.kernel.invoke_tool(context(ALICE), tool_call("files.read",
                                                                      {"path": "atlas/a"}))
    assert result.status == "succeeded"
    [decision] = [e for e in world.audit_of("authorization.checked")
                  if (e.metadata or {})["mode"] == "consume"]
    assert decision.grant_id == "g-atlas-2"


async def test_a_failed_revocation_read_fails_closed_and_spends_nothing() -> None:
    clock = Clock()
    world = files_world(read_grant(maxUses=5), clock=clock, live=True)
    codes: list[str | None] = []

    async def script(turn: TurnRequest, host: RuntimeHost) -> JsonValue:
        world.grants.fail = True  # the store goes down after admission
        result = await host.call("files.read", {"path": "atlas/a"})
        codes.append(getattr(result, "error", None) and result.error.code)
        return None

    await executor(world, script).execute(request())
    assert codes == ["authority_unavailable"] and world.handled == []
    assert await world.usage.used(NS, "g-atlas") == 0
    failed = [e for e in world.audit_of("authorization.checked")
              if e.reason == "authority_unavailable"]
    assert failed and failed[0].fail_closed is True
    assert (failed[0].metadata or {})["revocationChecks"][-1]["status"] == "unavailable"


@pytest.mark.parametrize(("offset_s", "code"), [
    (-1, "stale_request"), (3600, "stale_request"), (0, None)])
async def test_a_call_minted_outside_the_turn_is_stale(offset_s: int, code: str | None) -> None:
    clock = Clock()
    world = files_world(read_grant(), clock=clock)
    codes: list[str | None] = []

    async def script(turn: TurnRequest, host: RuntimeHost) -> JsonValue:
        replay = tool_call("files.read", {"path": "atlas/a"}, trace=TRACE,
                           requested_at=format_timestamp(T0 + timedelta(seconds=offset_s)))
        result = await host.invoke_tool(replay)
        codes.append(getattr(result, "error", None) and result.error.code)
        return None

    await executor(world, script).execute(request())
    assert codes == [code]
    assert len(world.handled) == (1 if code is None else 0)


async def test_freshness_is_turn_scoped() -> None:
    world = files_world(read_grant(), clock=Clock())
    old = tool_call("files.read", {"path": "atlas/a"},
                    requested_at=format_timestamp(T0 - timedelta(days=1)))
    assert (await world.kernel.invoke_tool(context(ALICE), old)).status == "succeeded"
