"""Each turn run has its own identity (SharedOS ADR 0027 turn lease isolation): its own
grant snapshot, never shared with another run of the same request, and every audit
record it causes names it (``metadata.turnId``)."""

from __future__ import annotations

import anyio
import pytest

from sharedos_redis.kernel.contracts import CapabilityRequirement, JsonValue
from sharedos_redis.kernel.turn import RuntimeHost, TurnRequest

from .kernel_world import make_world
from .test_grant_snapshot import CountingSource
from .test_turn import ALICE_READ, ALICE_TURN, execution, scripted

pytestmark = pytest.mark.anyio


async def test_two_overlapping_attempts_share_no_snapshot_and_name_their_own_turn() -> None:
    world = make_world(ALICE_TURN, ALICE_READ)
    world.register_files(output="q3 report")
    source = CountingSource(ALICE_TURN, ALICE_READ)
    world.kernel.authorizer._grants = source
    both_started = anyio.Event()
    started: list[int] = []

    async def script(turn: TurnRequest, host: RuntimeHost) -> JsonValue:
        started.append(turn.attempt)
        if len(started) == 2:
            both_started.set()
        await both_started.wait()  # the two runs overlap: same request, same context
        result = await host.call("files.read", {"name": "q3"})
        return {"attempt": turn.attempt, "read": result.status}

    executor, _ = scripted(world, script)
    async with anyio.create_task_group() as tg:
        for attempt, turn_id in ((1, "turn-a"), (2, "turn-b")):
            tg.start_soon(lambda a=attempt, t=turn_id: executor.execute(
                execution(), attempt=a, turn_id=t))
    # one grant load per run (admission, discovery and the tool call share it), never one
    assert source.loads == 2
    by_turn: dict[str, set[str]] = {}
    for event in world.audit.events:
        assert event.metadata is not None and "turnId" in event.metadata, event.type
        by_turn.setdefault(str(event.metadata["turnId"]), set()).add(event.type)
    assert set(by_turn) == {"turn-a", "turn-b"}
    for types in by_turn.values():
        assert {"turn.admitted", "tool.invoked", "turn.ended"} <= types


async def test_a_run_without_a_turn_id_gets_a_fresh_one_outside_records_have_none() -> None:
    world = make_world(ALICE_TURN, ALICE_READ)
    world.register_files(output="q3 report")

    async def script(turn: TurnRequest, host: RuntimeHost) -> JsonValue:
        return (await host.call("files.read", {"name": "q3"})).status

    executor, _ = scripted(world, script)
    await executor.execute(execution())
    await executor.execute(execution())
    ids = {str(e.metadata["turnId"]) for e in world.audit.events if e.metadata}
    assert len(ids) == 2
    world.audit.events.clear()
    await world.kernel.list_tools(execution().context)  # a direct operation: no turn
    assert all(e.metadata is None or "turnId" not in e.metadata for e in world.audit.events)


async def test_a_turn_snapshot_is_its_own_inside_an_outer_one() -> None:
    world = make_world(ALICE_TURN, ALICE_READ)
    source = CountingSource(ALICE_TURN, ALICE_READ)
    authorizer = world.kernel.authorizer
    authorizer._grants = source
    context = execution().context
    need = CapabilityRequirement(resource=ALICE_READ.capabilities[0].resource, action="read")
    with authorizer.snapshot("turn-a"):
        await authorizer.check(context, need)
        with authorizer.snapshot():  # an operation inside the turn shares it
            await authorizer.check(context, need)
        assert source.loads == 1
        with authorizer.snapshot("turn-b"):  # another turn never does
            await authorizer.check(context, need)
        assert source.loads == 2
