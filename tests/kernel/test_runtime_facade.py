"""A runtime is handed nothing that carries authority: walk everything it can reach."""

from __future__ import annotations

import functools
import types
from collections import deque
from collections.abc import Iterator
from typing import Any

import pytest

from sharedos_redis.kernel.authorizer import CapabilityAuthorizer
from sharedos_redis.kernel.contracts import AccessContext, CapabilityGrant, JsonValue
from sharedos_redis.kernel.kernel import Kernel
from sharedos_redis.kernel.memory import (
    InMemoryAuditSink,
    InMemoryGrantSource,
    InMemoryGrantUsageStore,
)
from sharedos_redis.kernel.runtime_facade import RuntimeFacade
from sharedos_redis.kernel.runtime_host import RuntimeHost, TurnHost, TurnRequest
from sharedos_redis.kernel.turn import TurnExecutor
from tests.kernel.kernel_world import ALICE, grant, invoke_grant, make_world
from tests.kernel.test_turn import execution

pytestmark = pytest.mark.anyio

AUTHORITY_TYPES = (Kernel, CapabilityAuthorizer, TurnHost, InMemoryGrantSource,
                   InMemoryGrantUsageStore, InMemoryAuditSink, CapabilityGrant, AccessContext)
"""What must be unreachable from what a runtime receives."""

_CLASS_ONLY = frozenset({"model_fields", "model_computed_fields"})
"""pydantic class attributes (deprecated on instances; they describe the class)."""
_OPAQUE = (type, types.ModuleType, types.BuiltinFunctionType, str, bytes, int, float, bool)


def _referents(obj: Any) -> Iterator[Any]:
    """What attribute access reaches from ``obj`` in one step (instance state, closures,
    bound selves, container items and public attributes); never a type's or a
    function's module globals, which every Python object reaches."""
    if isinstance(obj, dict):
        yield from obj.keys()
        yield from obj.values()
        return
    if isinstance(obj, list | tuple | set | frozenset | deque):
        yield from obj
        return
    if isinstance(obj, functools.partial):
        yield obj.func
        yield from obj.args
        yield from obj.keywords.values()
    if isinstance(obj, types.MethodType):
        yield obj.__self__
        yield obj.__func__
    if isinstance(obj, types.FunctionType):
        yield from (cell.cell_contents for cell in obj.__closure__ or ())
        yield from obj.__defaults__ or ()
        yield from (obj.__kwdefaults__ or {}).values()
    yield from getattr(obj, "__dict__", {}).values()
    for klass in type(obj).__mro__:
        for slot in getattr(klass, "__slots__", ()):
            value = getattr(obj, slot, None)
            yield value() if slot == "__weakref__" and value is not None else value
    for name in dir(obj):
        if not name.startswith("__") and name not in _CLASS_ONLY:
            try:
                yield getattr(obj, name)
            except Exception:  # a property that refuses is nothing reached
                continue


def reachable(*roots: Any) -> list[Any]:
    """Every object reachable from ``roots`` by :func:`_referents`."""
    seen: dict[int, Any] = {}
    queue = deque(roots)
    while queue:
        obj = queue.popleft()
        if obj is None or id(obj) in seen or isinstance(obj, _OPAQUE):
            continue
        seen[id(obj)] = obj
        queue.extend(_referents(obj))
    return list(seen.values())


def authority_in(*roots: Any) -> list[str]:
    """Names of the authority-carrying objects reachable from ``roots``."""
    return sorted({type(o).__name__ for o in reachable(*roots) if isinstance(o, AUTHORITY_TYPES)})


async def _what_a_runtime_receives() -> tuple[TurnRequest, RuntimeHost, list[str | None]]:
    world = make_world(invoke_grant("g-turn", ALICE),
                       grant("g-read", ALICE, "files", ["reports"], ["read"]))
    world.register_files()
    received: list[Any] = []

    class Runtime:
        async def run(self, turn: TurnRequest, host: RuntimeHost) -> JsonValue:
            received.extend((turn, host))
            result = await host.call("files.read", {})
            received.append(result.status)
            return None

    result = await TurnExecutor(world.kernel, Runtime()).execute(execution())
    assert result.status == "succeeded"
    return received[0], received[1], received[2:]


async def test_nothing_a_runtime_receives_reaches_authority() -> None:
    turn, host, statuses = await _what_a_runtime_receives()
    assert statuses == ["succeeded"]  # the facade still acts
    assert authority_in(turn, host) == []
    assert isinstance(host, RuntimeFacade)
    assert not hasattr(host, "__dict__")
    with pytest.raises(TypeError):
        vars(host)


def test_the_walk_finds_authority_where_it_is() -> None:
    """The walk is not blind: from the turn host itself it reaches the grant source."""
    world = make_world(grant("g-read", ALICE, "files", ["reports"], ["read"]))
    facade_less = world.kernel
    found = authority_in(facade_less)
    assert {"CapabilityAuthorizer", "InMemoryGrantSource", "Kernel"} <= set(found)


def test_the_facade_forwards_every_runtime_host_member() -> None:
    members = {name for name in dir(RuntimeHost) if not name.startswith("_")}
    assert members <= set(dir(RuntimeFacade)), members - set(dir(RuntimeFacade))
    assert members  # the protocol is not empty
