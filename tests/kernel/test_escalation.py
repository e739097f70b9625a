"""Escalation (SharedOS ADR 0011): a turn ends asking a human; it grants nothing."""

from __future__ import annotations

from typing import Any

import pytest

from sharedos_redis.kernel.contracts import (
    ExecutionEscalated,
    JsonValue,
    parse_wire,
)
from sharedos_redis.kernel.contracts import ExecutionResult as ExecutionResultType
from sharedos_redis.kernel.escalation import ESCALATE, ESCALATE_TOOL
from sharedos_redis.kernel.turn import RuntimeHost, TurnExecutor, TurnRequest
from tests.kernel.kernel_world import (
    ALICE,
    OWNER,
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

READ = grant("g-read", ALICE, "files", ["reports"], ["read"])


def world_() -> World:
    world = make_world(invoke_grant("g-turn", ALICE), READ)
    world.register_files()
    world.register_files(file_tool("files.write", action="write"))
    return world


async def run(world: World, script: Any, *, namespaces: tuple[str, ...] = ("files", "sharedos"),
              offer_escalate: bool = True) -> tuple[Any, list[Any]]:
    results: list[Any] = []

    class Runtime:
        async def run(self, turn: TurnRequest, host: RuntimeHost) -> JsonValue:
            results.append([t.name for t in turn.tools])
            return await script(host, results)

    tools = (file_tool(), file_tool("files.write", action="write"),
             *((ESCALATE_TOOL,) if offer_escalate else ()))
    request = execution(tools=tools).model_copy(
        update={"context": context(ALICE, namespaces=namespaces)})
    return await TurnExecutor(world.kernel, Runtime()).execute(request), results


async def reach_then_escalate(host: RuntimeHost, results: list[Any]) -> JsonValue:
    results.append(await host.call("files.write", {}))
    results.append(await host.call(ESCALATE, {"reason": "I need write access to reports"}))
    results.append(await host.call("files.write", {}))  # still nothing granted
    return "done anyway"


async def test_a_refused_runtime_ends_its_turn_asking_a_human() -> None:
    world = world_()
    result, results = await run(world, reach_then_escalate)
    offered, refused, escalated, again = results
    assert ESCALATE in offered and "files.write" not in offered
    assert refused.error.code == "tool_unavailable" and again.error.code == "tool_unavailable"
    assert escalated.status == "succeeded" and escalated.output == {"escalation": "pending"}
    assert isinstance(result, ExecutionEscalated)
    assert result.escalation.reason == "I need write access to reports"
    assert (result.escalation.reviewer, result.escalation.status) == (OWNER, "pending")
    [requested] = world.audit_of("escalation.requested")
    assert (requested.outcome, requested.reason) == ("escalated", "escalation_requested")
    ended = world.audit_of("turn.ended")[-1]
    assert (ended.outcome, ended.reason) == ("escalated", "escalation_requested")
    assert parse_wire(ExecutionResultType, result.to_wire()) == result


@pytest.mark.parametrize(("namespaces", "offer"), [(("files",), True),
                                                   (("files", "sharedos"), False)])
async def test_escalation_is_gated_by_the_catalogue(namespaces: tuple[str, ...],
                                                    offer: bool) -> None:
    result, results = await run(world_(), reach_then_escalate, namespaces=namespaces,
                                offer_escalate=offer)
    assert ESCALATE not in results[0] and results[2].error.code == "tool_unavailable"
    assert result.status == "succeeded"


@pytest.mark.parametrize("arguments", [{}, {"reason": ""}, {"reason": "x", "grant": "all"},
                                       {"reason": 7}])
async def test_an_escalation_needs_exactly_a_reason(arguments: dict[str, Any]) -> None:
    async def script(host: RuntimeHost, results: list[Any]) -> JsonValue:
        results.append(await host.call(ESCALATE, arguments))
        return "ok"

    world = world_()
    result, results = await run(world, script)
    assert results[1].error.code == "invalid_tool_arguments"
    assert result.status == "succeeded" and world.audit_of("escalation.requested") == []


async def test_only_a_running_turn_can_escalate() -> None:
    world = world_()
    direct = await world.kernel.invoke_tool(context(ALICE, namespaces=("sharedos",)),
                                            tool_call(ESCALATE, {"reason": "help"}))
    assert direct.status == "denied" and direct.error.code == "tool_unavailable"
