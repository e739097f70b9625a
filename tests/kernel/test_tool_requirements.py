"""Per-call capability resolution: exact requirement per call, inside a declared ceiling."""

from __future__ import annotations

from typing import Any

import pytest

from sharedos_redis.errors import ContractError
from sharedos_redis.kernel.contracts import (
    AccessContext,
    CapabilityRequirement,
    JsonValue,
    ResourceRef,
    ToolCall,
    ToolDefinition,
    ToolDenied,
    ToolFailed,
    ToolSucceeded,
    human,
)
from sharedos_redis.kernel.requirements import RequirementResolver, path_argument
from tests.kernel.kernel_world import (
    ALICE,
    NOW,
    World,
    context,
    file_tool,
    grant,
    make_world,
    tool_call,
)

pytestmark = pytest.mark.anyio

CEILING = ("projects",)
"""files.read reads below files/projects; each call names the exact file."""
ATLAS = grant("g-atlas", ALICE, "files", ["projects", "atlas"], ["read"], scope="descendants")


def resolving_world(*grants: Any, resolve: RequirementResolver | None = None,
                    output: Any = "text") -> World:
    world = make_world(*grants)

    async def handler(ctx: AccessContext, call: ToolCall) -> Any:
        world.handled.append(call)
        return output(call) if callable(output) else output

    world.kernel.register_tool(file_tool(path=CEILING), handler,
                               resolve=resolve or path_argument("path"))
    return world


def checked(world: World) -> list[tuple[tuple[str, ...], str, str | None]]:
    """(path, mode, reason) of every authorization.checked record."""
    return [(tuple(e.resource.path) if e.resource else (), (e.metadata or {})["mode"], e.reason)
            for e in world.audit_of("authorization.checked")]


async def test_the_exact_path_of_the_call_is_authorized() -> None:
    world = resolving_world(ATLAS)
    result = await world.kernel.invoke_tool(
        context(ALICE), tool_call("files.read", {"path": "atlas/plan.md"}))
    assert isinstance(result, ToolSucceeded) and result.output == "text"
    assert checked(world)[-1] == (("projects", "atlas", "plan.md"), "consume", "allowed")


@pytest.mark.parametrize("path", ["zeus/plan.md", ["zeus", "plan.md"], "atlas-secret/x"])
async def test_a_model_widening_the_path_is_denied_with_the_authorizers_code(path: Any) -> None:
    world = resolving_world(ATLAS)
    result = await world.kernel.invoke_tool(context(ALICE), tool_call("files.read",
                                                                      {"path": path}))
    assert isinstance(result, ToolDenied) and result.error.code == "no_matching_grant"
    assert world.handled == []
    [tool_record] = world.audit_of("tool.invoked")
    assert tool_record.reason == "no_matching_grant" and tool_record.outcome == "denied"


@pytest.mark.parametrize("arguments", [
    {"path": "../secrets"}, {"path": "atlas/../../etc"}, {"path": "a\x00b"}, {"path": ""},
    {"path": 7}, {}, {"path": []}, {"path": ["atlas", "/etc"]},
])
async def test_arguments_that_name_no_valid_path_fail_before_any_decision(
        arguments: dict[str, Any]) -> None:
    world = resolving_world(ATLAS)
    result = await world.kernel.invoke_tool(context(ALICE), tool_call("files.read", arguments))
    assert isinstance(result, ToolFailed) and result.error.code == "invalid_tool_arguments"
    assert world.handled == []
    assert [mode for _, mode, _ in checked(world)] == ["visible"]  # nothing consumed


def _escape(requirement: dict[str, Any]) -> RequirementResolver:
    def resolve(ctx: AccessContext, call: ToolCall,
                ceiling: CapabilityRequirement) -> CapabilityRequirement:
        return CapabilityRequirement.from_wire(requirement)

    return resolve


@pytest.mark.parametrize("requirement", [
    {"resource": {"namespace": "calendar", "path": ["projects", "atlas"]}, "action": "read"},
    {"resource": {"namespace": "files", "path": ["projects", "atlas"]}, "action": "write"},
    {"resource": {"namespace": "files", "path": []}, "action": "read"},
    {"resource": {"namespace": "files", "path": ["other", "atlas"]}, "action": "read"},
])
async def test_a_tool_resolving_outside_its_ceiling_is_rejected(
        requirement: dict[str, Any]) -> None:
    world = resolving_world(ATLAS, grant("g-all", ALICE, "files", [], ["*"], scope="descendants"),
                            grant("g-cal", ALICE, "calendar", [], ["*"], scope="descendants"),
                            resolve=_escape(requirement))
    result = await world.kernel.invoke_tool(context(ALICE), tool_call("files.read",
                                                                      {"path": "atlas"}))
    assert isinstance(result, ToolFailed) and result.error.code == "invalid_tool_requirement"
    assert world.handled == []  # even though a grant would have allowed the widened request


async def test_an_owner_crossing_requirement_is_an_authorization_denial() -> None:
    other = human("mallory").to_wire()
    world = resolving_world(ATLAS, resolve=_escape({
        "resource": {"namespace": "files", "path": ["projects", "atlas"], "owner": other},
        "action": "read"}))
    result = await world.kernel.invoke_tool(context(ALICE), tool_call("files.read",
                                                                      {"path": "atlas"}))
    assert isinstance(result, ToolDenied) and result.error.code == "invalid_request"
    assert world.handled == []


@pytest.mark.parametrize(("error", "code"), [
    (ContractError("X", [{"loc": (), "msg": "bad"}]), "invalid_tool_arguments"),
    (KeyError("path"), "tool_requirement_resolution_failed"),
])
async def test_a_resolver_that_raises_fails_the_call(error: Exception, code: str) -> None:
    def resolve(ctx: AccessContext, call: ToolCall,
                ceiling: CapabilityRequirement) -> CapabilityRequirement:
        raise error

    world = resolving_world(ATLAS, resolve=resolve)
    result = await world.kernel.invoke_tool(context(ALICE), tool_call("files.read", {}))
    assert isinstance(result, ToolFailed) and result.error.code == code
    assert "path" not in result.error.message


async def test_discovery_shows_the_tool_when_some_call_could_be_allowed() -> None:
    deeper = grant("g-one", ALICE, "files", ["projects", "atlas", "plan.md"], ["read"])
    above = grant("g-above", ALICE, "files", ["projects"], ["read"], scope="descendants")
    beside = grant("g-beside", ALICE, "files", ["archive"], ["read"], scope="descendants")
    exact_above = grant("g-exact", ALICE, "files", [], ["read"])  # covers only files/ itself
    for grants, listed in (((deeper,), True), ((above,), True), ((ATLAS,), True),
                           ((beside,), False), ((exact_above,), False), ((), False)):
        world = resolving_world(*grants)
        names = [t.name for t in await world.kernel.list_tools(context(ALICE))]
        assert ("files.read" in names) is listed, grants


async def test_a_bounded_grant_says_exhausted_and_leaves_the_next_catalogue() -> None:
    world = resolving_world(grant("g-once", ALICE, "files", ["projects"], ["read"],
                                  scope="descendants", max_uses=1))
    ctx = context(ALICE)
    first = await world.kernel.invoke_tool(ctx, tool_call("files.read", {"path": "a"}))
    second = await world.kernel.invoke_tool(ctx, tool_call("files.read", {"path": "a"}))
    assert first.status == "succeeded"
    assert isinstance(second, ToolDenied) and second.error.code == "grant_exhausted"
    assert await world.kernel.list_tools(ctx) == []


def _result(kind: str) -> Any:
    def build(call: ToolCall) -> Any:
        common = {"callId": call.id, "tool": call.tool, "completedAt": NOW}
        if kind == "own-succeeded":
            return ToolSucceeded.from_wire({**common, "output": {"n": 1}})
        if kind == "own-failed":
            return ToolFailed.from_wire({**common, "error": {"code": "not_found",
                                                             "message": "no such file"}})
        if kind == "other-call":
            return ToolSucceeded.from_wire({**common, "callId": "call-elsewhere", "output": 1})
        if kind == "other-tool":
            return ToolSucceeded.from_wire({**common, "tool": "files.write", "output": 1})
        if kind == "denied":
            return ToolDenied.from_wire({**common, "error": {"code": "no_matching_grant",
                                                             "message": "x"}})
        return float("nan")

    return build


@pytest.mark.parametrize(("kind", "status", "code"), [
    ("own-succeeded", "succeeded", None), ("own-failed", "failed", "not_found"),
    ("other-call", "failed", "invalid_tool_result"),
    ("other-tool", "failed", "invalid_tool_result"),
    ("denied", "failed", "invalid_tool_result"), ("nan", "failed", "invalid_tool_result"),
])
async def test_a_handler_result_must_answer_this_call(kind: str, status: str,
                                                      code: str | None) -> None:
    world = resolving_world(ATLAS, output=_result(kind))
    result = await world.kernel.invoke_tool(context(ALICE), tool_call("files.read",
                                                                      {"path": "atlas/x"}))
    assert result.status == status and result.call_id == "call-1"
    assert getattr(result, "error", None) is None or result.error.code == code


async def test_fixed_requirement_tools_still_hide_a_refused_call() -> None:
    world = make_world()
    definition: ToolDefinition = world.register_files()
    result = await world.kernel.invoke_tool(context(ALICE), tool_call(definition.name, {}))
    assert isinstance(result, ToolDenied) and result.error.code == "tool_unavailable"


async def test_the_example_file_tool_reads_only_inside_its_grant() -> None:
    from scheduler_example.app import FILES_READ, read_atlas_file

    world = make_world(grant("g-atlas", ALICE, "files", ["projects", "atlas"], ["read"],
                             scope="descendants"))
    world.kernel.register_tool(FILES_READ, read_atlas_file, resolve=path_argument("path"))
    ctx = context(ALICE)
    ok = await world.kernel.invoke_tool(ctx, tool_call("files.read", {"path": "atlas.md"}))
    assert isinstance(ok, ToolSucceeded) and isinstance(ok.output, dict)
    climb = await world.kernel.invoke_tool(ctx, tool_call("files.read", {"path": "../zeus"}))
    assert climb.status == "failed" and climb.error.code == "invalid_tool_arguments"
    resource = ResourceRef(namespace="files", path=("projects", "atlas", "atlas.md"))
    assert any(e.resource == resource for e in world.audit_of("authorization.checked"))
    output: JsonValue = ok.output
    assert output["path"] == "atlas.md"
