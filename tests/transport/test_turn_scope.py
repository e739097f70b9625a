"""The turn scope: nested request ids and tool keys derive from the request and call order."""

from __future__ import annotations

import anyio
import pytest

from sharedos_redis.transport.turn_scope import (
    TurnScope,
    child_id,
    current_turn,
    request_id,
    tool_key,
    turn_scope,
)

pytestmark = pytest.mark.anyio


def test_outside_a_turn_ids_are_fresh() -> None:
    assert current_turn.get() is None
    assert request_id() != request_id()


def test_two_attempts_name_the_same_nested_requests_in_the_same_order() -> None:
    first, second = TurnScope("ns", "parent-1", 1), TurnScope("ns", "parent-1", 2)
    with turn_scope(first):
        ids_1 = [request_id(), request_id()]
    with turn_scope(second):
        ids_2 = [request_id(), request_id()]
    assert ids_1 == ids_2 == [child_id("parent-1", 1), child_id("parent-1", 2)]
    assert ids_1[0] != ids_1[1]
    assert first.turn_id != second.turn_id  # a fresh turn identity per attempt
    assert current_turn.get() is None


def test_ids_differ_between_parents_and_never_collide_by_concatenation() -> None:
    assert child_id("a", 12) != child_id("a1", 2)
    assert child_id("a", 1) != child_id("b", 1)
    assert len(child_id("a", 1)) == 32 and child_id("a", 1).isalnum()
    assert tool_key("a", "pay", 1) != tool_key("a", "pa", 1)
    assert tool_key("a", "pay", 1) != child_id("a", 1)


def test_tool_keys_count_per_tool() -> None:
    scope = TurnScope("ns", "p", 1)
    keys = [scope.next_tool_key("pay"), scope.next_tool_key("read"), scope.next_tool_key("pay")]
    assert keys == [tool_key("p", "pay", 1), tool_key("p", "read", 1), tool_key("p", "pay", 2)]


async def test_the_scope_follows_tasks_started_inside_it() -> None:
    seen: list[str | None] = []

    async def child() -> None:
        scope = current_turn.get()
        seen.append(None if scope is None else scope.request_id)

    with turn_scope(TurnScope("ns", "p", 1)):
        async with anyio.create_task_group() as tg:
            tg.start_soon(child)
    await child()
    assert seen == ["p", None]
