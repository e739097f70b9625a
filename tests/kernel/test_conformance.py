"""SharedOS's kernel conformance matrix, row by row, on this host's kernel.

``ROWS`` transcribes ``docs/conformance/kernel-conformance.json`` of the SharedOS
repository (27 rows: case id, condition id, expected outcome, reason codes of the
embedded column). Each row is either built here, as a scenario that must refuse
with exactly those codes (and let the control attempt through), or declared in
``DECLARED`` with the reason it is not built (SharedOS ADR 0013: the matrix is the
case set; a row not built is declared, never silently dropped).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from datetime import timedelta
from typing import Any

import pytest

from sharedos_redis.kernel.contracts import (
    AccessContext,
    CapabilityGrant,
    CapabilityRequirement,
    JsonValue,
    ToolCall,
    ToolSucceeded,
    format_timestamp,
)
from sharedos_redis.kernel.requirements import RequirementResolver, path_argument
from sharedos_redis.kernel.turn import RuntimeHost, TurnExecutor, TurnRequest
from tests.kernel.kernel_world import (
    ALICE,
    NS,
    T0,
    World,
    context,
    file_tool,
    grant,
    invoke_grant,
    make_world,
    tool_call,
)
from tests.kernel.test_time_rules import Clock
from tests.kernel.test_turn import execution

pytestmark = pytest.mark.anyio

ROWS: tuple[tuple[str, str, str, tuple[str, ...]], ...] = (
    ("forged-grant", "baseline", "Treated as data; mints no authority", ("no_matching_grant",)),
    ("hidden-tool", "baseline", "Undiscoverable and uninvocable", ("tool_unavailable",)),
    ("read-to-mutation", "baseline", "Deny and audit", ("no_matching_grant",)),
    ("expired-grant", "read-grant-expired", "Deny", ("no_matching_grant",)),
    ("replayed-grant", "grant-revoked", "Deny; invalidate descendants", ("no_matching_grant",)),
    ("replayed-grant", "ancestor-revoked", "Deny; invalidate descendants",
     ("delegation_chain_invalid",)),
    ("revoked-mid-turn", "revoked-while-the-first-turn-runs", "Deny on the next turn",
     ("no_matching_grant",)),
    ("expired-mid-turn", "expired-while-the-turn-runs", "Deny on the next call",
     ("no_matching_grant",)),
    ("namespace-crossing", "baseline", "Deny and audit", ("invalid_request",)),
    ("bounded-grant", "single-use-write-grant", "Deny", ("grant_exhausted",)),
    ("usage-store-unavailable", "counter-unreachable", "Fail closed",
     ("usage_store_unavailable",)),
    ("authority-unavailable", "outage-at-turn-boundary",
     "Fail closed, distinguishable from denial", ("authority_unavailable",)),
    ("tool-ceiling-escape", "baseline", "Reject", ("invalid_tool_requirement",)),
    ("invalid-tool-result", "baseline", "Reject", ("invalid_tool_result",)),
    ("budget-exceeded", "tool-call-ceiling", "Deny", ("tool_call_limit_exceeded",)),
    ("budget-exceeded", "step-ceiling", "Deny", ("step_limit_exceeded",)),
    ("grant-material", "baseline", "Impossible by construction",
     ("no_grant_material_reachable",)),
    ("over-broad-delegation", "child-claims-more-than-its-parent", "Narrow only",
     ("delegation_chain_invalid",)),
    ("rollback-unavailable", "baseline", "Undiscoverable and uninvocable",
     ("tool_unavailable",)),
    ("rollback-out-of-scope", "restore-confined-to-scratch", "Deny and audit",
     ("no_matching_grant",)),
    ("broker-ungranted", "broker-unattached", "Undiscoverable and uninvocable",
     ("tool_unavailable",)),
    ("broker-ungranted", "broker-attached-ungranted", "Undiscoverable and uninvocable",
     ("tool_unavailable",)),
    ("broker-out-of-scope", "search-confined-to-one-page-tree", "Deny and audit",
     ("no_matching_grant",)),
    ("escalation", "baseline", "Recorded and audited; a human reviewer is assumed",
     ("escalation_requested", "tool_unavailable")),
    ("record-completeness", "baseline", "Record present and complete",
     ("no_matching_grant", "tool_unavailable")),
    ("typed-governed-views", "view-bound-grant",
     "Disclosure narrowed to the view's declared fields", ("no_matching_grant", "view_required")),
    ("replay-freshness", "baseline", "Replay succeeds 0% of the time", ("stale_request",)),
)

DECLARED: dict[tuple[str, str], str] = {
    ("typed-governed-views", "view-bound-grant"):
        "typed governed views (SharedOS ADR 0019) belong to a resource plane serving "
        "records; a messaging host serves none",
}

Attempt = Callable[[], Awaitable[list[str | None]]]
"""A row's scenario: the codes of its attempts in order (None: the control succeeded)."""

WORKSPACE = ("workspace",)
READ_WS = grant("g-read", ALICE, "files", ["workspace"], ["read"], scope="descendants")
WRITE_SCRATCH = grant("g-write-scratch", ALICE, "files", ["workspace", "scratch"], ["write"],
                      scope="descendants")
TURN = invoke_grant("g-turn", ALICE)


def _code(result: Any) -> str | None:
    error = getattr(result, "error", None)
    return None if error is None else str(error.code)


def _with(grant_: CapabilityGrant, **changes: Any) -> CapabilityGrant:
    wire = grant_.to_wire()
    constraints = {**wire["constraints"], **changes.pop("constraints", {})}
    return CapabilityGrant.from_wire({**wire, **changes, "constraints": constraints})


def workspace(*grants: CapabilityGrant, clock: Clock | None = None,
              resolve: RequirementResolver | None = None, output: Any = "text") -> World:
    """Alice's world: per-call files.read/files.write below files/workspace."""
    world = make_world(TURN, *grants, clock=clock or Clock(), chains=True)

    async def handler(ctx: AccessContext, call: ToolCall) -> Any:
        world.handled.append(call)
        return output(call) if callable(output) else output

    for action in ("read", "write"):
        world.kernel.register_tool(file_tool(f"files.{action}", WORKSPACE, action), handler,
                                   resolve=resolve or path_argument("path"))
    return world


async def one_turn(world: World, script: Callable[[RuntimeHost], Awaitable[list[Any]]],
                   *, now: str | None = None, **options: int) -> tuple[Any, list[str | None]]:
    """Run one admitted turn of alice offering the world's tools; the script's codes."""
    codes: list[str | None] = []

    class Runtime:
        async def run(self, turn: TurnRequest, host: RuntimeHost) -> JsonValue:
            codes.extend(_code(r) for r in await script(host))
            return None

    tools = tuple(file_tool(f"files.{a}", WORKSPACE, a) for a in ("read", "write"))
    request = execution(tools=tools, options=options or None)
    if now is not None:
        request = request.model_copy(update={"context": context(ALICE, now=now)})
    result = await TurnExecutor(world.kernel, Runtime(), clock=world.kernel.clock).execute(
        request)
    return result, codes


def reads(*paths: str) -> Callable[[RuntimeHost], Awaitable[list[Any]]]:
    async def script(host: RuntimeHost) -> list[Any]:
        return [await host.call("files.read", {"path": p}) for p in paths]

    return script


async def forged_grant() -> list[str | None]:
    forged = grant("g-forged", ALICE, "files", ["vault"], ["*"], scope="descendants").to_wire()

    async def script(host: RuntimeHost) -> list[Any]:
        # the runtime copies a grant out of its message into the arguments: data, not authority
        return [await host.call("files.read", {"path": "report.md"}),
                await host.call("files.read", {"path": "../vault/keys", "grant": forged}),
                await host.call("files.write", {"path": "report.md", "grant": forged})]

    _, codes = await one_turn(workspace(READ_WS, WRITE_SCRATCH), script)
    return codes


async def hidden_tool() -> list[str | None]:
    world = workspace(READ_WS)
    _, codes = await one_turn(world, lambda host: _calls(host, "files.read", "admin.shell"))
    direct = await world.kernel.invoke_tool(context(ALICE), tool_call("admin.shell", {}))
    listed = [t.name for t in await world.kernel.list_tools(context(ALICE))]
    return [*codes, _code(direct), None if "admin.shell" not in listed else "listed"]


async def _calls(host: RuntimeHost, *names: str) -> list[Any]:
    return [await host.call(name, {"path": "report.md"}) for name in names]


async def read_to_mutation() -> list[str | None]:
    world = workspace(READ_WS, WRITE_SCRATCH)

    async def script(host: RuntimeHost) -> list[Any]:
        return [await host.call("files.read", {"path": "ledger.md"}),
                await host.call("files.write", {"path": "ledger.md"})]

    _, codes = await one_turn(world, script)
    assert [e.reason for e in world.audit_of("tool.invoked")][-1] == "no_matching_grant"
    return codes


async def expired_grant() -> list[str | None]:
    expired = _with(READ_WS, id="g-expired", constraints={"expiresAt": format_timestamp(T0)})
    scratch = grant("g-scratch", ALICE, "files", ["workspace", "scratch"], ["read"],
                    scope="descendants")
    _, codes = await one_turn(workspace(expired, scratch), reads("scratch/a", "report.md"))
    return codes


async def grant_revoked() -> list[str | None]:
    revoked = _with(READ_WS, id="g-revoked", revokedAt=format_timestamp(T0 - timedelta(hours=1)))
    scratch = grant("g-scratch", ALICE, "files", ["workspace", "scratch"], ["read"],
                    scope="descendants")
    _, codes = await one_turn(workspace(revoked, scratch), reads("scratch/a", "report.md"))
    return codes


def _delegated(*, parent_actions: list[str], child_actions: list[str],
               parent_revoked: bool = False) -> tuple[CapabilityGrant, CapabilityGrant]:
    """The orchestrator's (the acting authority's) grant and its delegation to alice."""
    from tests.kernel.kernel_world import AUTHORITY

    def capability(actions: list[str]) -> dict[str, Any]:
        return {"resource": {"namespace": "files", "path": ["workspace"]}, "actions": actions,
                "scope": "descendants"}

    issued = format_timestamp(T0 - timedelta(hours=2))
    parent = CapabilityGrant.from_wire({
        "id": "g-orchestrator", "namespaceId": NS, "subject": AUTHORITY.to_wire(),
        "issuer": {"kind": "human", "userId": "olivia"},
        "capabilities": [capability(parent_actions)], "constraints": {"delegationDepth": 1},
        "issuedAt": issued,
        **({"revokedAt": format_timestamp(T0 - timedelta(hours=1))} if parent_revoked else {})})
    child = CapabilityGrant.from_wire({
        "id": "g-delegated", "namespaceId": NS, "subject": ALICE.to_wire(),
        "issuer": AUTHORITY.to_wire(), "capabilities": [capability(child_actions)],
        "constraints": {}, "issuedAt": format_timestamp(T0 - timedelta(hours=1)),
        "parentGrantId": "g-orchestrator"})
    return parent, child


async def ancestor_revoked() -> list[str | None]:
    parent, child = _delegated(parent_actions=["read"], child_actions=["read"],
                               parent_revoked=True)
    scratch = grant("g-scratch", ALICE, "files", ["workspace", "scratch"], ["read"],
                    scope="descendants")
    _, codes = await one_turn(workspace(parent, child, scratch), reads("scratch/a", "report.md"))
    return codes


async def over_broad_delegation() -> list[str | None]:
    parent, child = _delegated(parent_actions=["read"], child_actions=["read", "write"])
    world = workspace(parent, child, WRITE_SCRATCH)

    async def script(host: RuntimeHost) -> list[Any]:
        return [await host.call("files.write", {"path": "scratch/a"}),
                await host.call("files.write", {"path": "report.md"})]

    _, codes = await one_turn(world, script)
    return codes


async def revoked_mid_turn() -> list[str | None]:
    clock = Clock()
    scratch = grant("g-scratch", ALICE, "files", ["workspace", "scratch"], ["read"],
                    scope="descendants")
    world = workspace(READ_WS, scratch, clock=clock)

    async def first(host: RuntimeHost) -> list[Any]:
        before = await host.call("files.read", {"path": "report.md"})
        world.grants.revoke(NS, READ_WS.id, clock.now)
        clock.advance(1)
        return [before, await host.call("files.read", {"path": "report.md"})]

    _, codes = await one_turn(world, first)
    clock.advance(1)
    _, later = await one_turn(world, reads("report.md"), now=format_timestamp(clock.now))
    return [*codes, *later]


async def expired_mid_turn() -> list[str | None]:
    clock = Clock()
    expiring = _with(READ_WS, constraints={"expiresAt": format_timestamp(T0 + timedelta(
        seconds=1))})
    scratch = grant("g-scratch", ALICE, "files", ["workspace", "scratch"], ["read"],
                    scope="descendants")
    world = workspace(expiring, scratch, clock=clock)

    async def script(host: RuntimeHost) -> list[Any]:
        results = []
        for _ in range(2):
            results.append(await host.call("files.read", {"path": "report.md"}))
            clock.advance(1)  # one step per mediated operation
        return results

    _, codes = await one_turn(world, script)
    return codes


def _owner_crossing(ctx: AccessContext, call: ToolCall,
                    ceiling: CapabilityRequirement) -> CapabilityRequirement:
    wire = path_argument("path")(ctx, call, ceiling).to_wire()
    if call.arguments.get("owner"):
        wire["resource"]["owner"] = {"kind": "human", "userId": str(call.arguments["owner"])}
    return CapabilityRequirement.from_wire(wire)


async def namespace_crossing() -> list[str | None]:
    world = workspace(READ_WS, resolve=_owner_crossing)

    async def script(host: RuntimeHost) -> list[Any]:
        return [await host.call("files.read", {"path": "report.md"}),
                await host.call("files.read", {"path": "report.md", "owner": "mallory"})]

    _, codes = await one_turn(world, script)
    foreign = context(ALICE).model_copy(update={"namespace_id": "other-ns"})
    crossed = await world.kernel.invoke_tool(foreign, tool_call("files.read",
                                                                {"path": "report.md"}))
    # a context in another namespace finds no grant (the host never builds one)
    return [*codes, "invalid_request" if crossed.status == "denied" else "allowed"]


async def bounded_grant() -> list[str | None]:
    once = grant("g-ledger", ALICE, "files", ["workspace", "ledger"], ["write"], max_uses=1)
    world = workspace(once)

    async def script(host: RuntimeHost) -> list[Any]:
        return [await host.call("files.write", {"path": "ledger"}),
                await host.call("files.write", {"path": "ledger"})]

    _, codes = await one_turn(world, script)
    return codes


async def usage_store_unavailable() -> list[str | None]:
    once = grant("g-ledger", ALICE, "files", ["workspace", "ledger"], ["write"], max_uses=1)
    world = workspace(READ_WS, once)

    async def script(host: RuntimeHost) -> list[Any]:
        world.usage.fail = True
        return [await host.call("files.read", {"path": "report.md"}),
                await host.call("files.write", {"path": "ledger"})]

    _, codes = await one_turn(world, script)
    return codes


async def authority_unavailable() -> list[str | None]:
    world = workspace(READ_WS)
    world.grants.fail = True
    result, codes = await one_turn(world, reads("report.md"))
    assert codes == [] and result.status == "denied"
    return [None, _code(result)]


def _escaping(ctx: AccessContext, call: ToolCall,
              ceiling: CapabilityRequirement) -> CapabilityRequirement:
    if call.arguments.get("escape"):
        return CapabilityRequirement.from_wire({
            "resource": {"namespace": "secrets", "path": ["vault"]}, "action": "read"})
    return path_argument("path")(ctx, call, ceiling)


async def tool_ceiling_escape() -> list[str | None]:
    world = workspace(READ_WS, grant("g-vault", ALICE, "secrets", ["vault"], ["read"]),
                      resolve=_escaping)

    async def script(host: RuntimeHost) -> list[Any]:
        return [await host.call("files.read", {"path": "a"}),
                await host.call("files.read", {"path": "a", "escape": True})]

    _, codes = await one_turn(world, script)
    return codes


async def invalid_tool_result() -> list[str | None]:
    def output(call: ToolCall) -> Any:
        if call.arguments.get("path") == "mismatch":
            return ToolSucceeded(call_id="another-call", tool=call.tool,
                                 completed_at=format_timestamp(T0), output="x")
        return "text"

    world = workspace(READ_WS, output=output)
    _, codes = await one_turn(world, reads("report.md", "mismatch"))
    return codes


async def tool_call_ceiling() -> list[str | None]:
    _, codes = await one_turn(workspace(READ_WS), reads("a", "b"), maxToolCalls=1, maxSteps=8)
    return codes


async def step_ceiling() -> list[str | None]:
    async def script(host: RuntimeHost) -> list[Any]:
        results = []
        for _ in range(3):
            host.declare_step()
            results.append(await host.call("files.read", {"path": "a"}))
        return results

    _, codes = await one_turn(workspace(READ_WS), script, maxToolCalls=8, maxSteps=2)
    return codes


async def grant_material() -> list[str | None]:
    from tests.kernel.test_runtime_facade import authority_in

    seen: list[Any] = []

    async def script(host: RuntimeHost) -> list[Any]:
        seen.append(host)
        return [await host.call("files.read", {"path": "a"})]

    _, codes = await one_turn(workspace(READ_WS), script)
    # the runtime enumerates every surface it was handed: nothing carries authority
    return [*codes, "no_grant_material_reachable" if authority_in(*seen) == [] else "reached"]


async def escalation() -> list[str | None]:
    from sharedos_redis.kernel.escalation import ESCALATE, ESCALATE_TOOL

    world = workspace(READ_WS)

    class Runtime:
        async def run(self, turn: TurnRequest, host: RuntimeHost) -> JsonValue:
            codes.append(_code(await host.call("files.read", {"path": "a"})))
            codes.append(_code(await host.call("files.write", {"path": "a"})))
            codes.append(_code(await host.call(ESCALATE, {"reason": "writes need a human"})))
            return None

    codes: list[str | None] = []
    request = execution(tools=(*(file_tool(f"files.{a}", WORKSPACE, a) for a in ("read",
                                                                                 "write")),
                               ESCALATE_TOOL))
    request = request.model_copy(update={"context": context(
        ALICE, namespaces=("files", "sharedos"))})
    result = await TurnExecutor(world.kernel, Runtime()).execute(request)
    assert [e.type for e in world.audit_of("escalation.requested")] == ["escalation.requested"]
    ended = "escalation_requested" if result.status == "escalated" else result.status
    return [*codes, ended]


async def rollback_unavailable() -> list[str | None]:
    world = workspace(READ_WS, WRITE_SCRATCH)

    async def script(host: RuntimeHost) -> list[Any]:
        return [await host.call("files.read", {"path": "a"}),
                await host.call("snapshot.restore", {"path": "a"})]

    _, codes = await one_turn(world, script)
    return codes


def _restore_world(*grants: CapabilityGrant) -> World:
    world = workspace(*grants)

    async def restore(ctx: AccessContext, call: ToolCall) -> JsonValue:
        world.handled.append(call)
        return "restored"

    world.kernel.register_tool(file_tool("snapshot.restore", WORKSPACE, "snapshot:restore"),
                               restore, resolve=path_argument("path"))
    return world


async def rollback_out_of_scope() -> list[str | None]:
    scoped = grant("g-restore", ALICE, "files", ["workspace", "scratch"], ["snapshot:restore"],
                   scope="descendants")
    world = _restore_world(READ_WS, scoped)
    ctx = context(ALICE)
    inside = await world.kernel.invoke_tool(ctx, tool_call("snapshot.restore",
                                                           {"path": "scratch/x"}))
    outside = await world.kernel.invoke_tool(ctx, tool_call("snapshot.restore",
                                                            {"path": "report.md"}))
    return [_code(inside), _code(outside)]


def _notion(world: World, attached: bool) -> None:
    async def search(ctx: AccessContext, call: ToolCall) -> JsonValue:
        world.handled.append(call)
        return []

    if attached:
        definition = file_tool("notion.search", (), "search").model_copy(update={
            "namespace": "files", "required_capability": CapabilityRequirement.from_wire({
                "resource": {"namespace": "notion", "path": []}, "action": "search"})})
        world.kernel.register_tool(definition, search, resolve=path_argument("page"))


async def broker(attached: bool, granted: bool) -> list[str | None]:
    grants = [READ_WS]
    if granted:
        grants.append(grant("g-handbook", ALICE, "notion", ["Handbook"], ["search"],
                            scope="descendants"))
    world = workspace(*grants)
    _notion(world, attached)
    ctx = context(ALICE)
    control = await world.kernel.invoke_tool(ctx, tool_call("files.read", {"path": "a"}))
    inside = await world.kernel.invoke_tool(ctx, tool_call("notion.search",
                                                           {"page": "Handbook/Onboarding"}))
    outside = await world.kernel.invoke_tool(ctx, tool_call("notion.search",
                                                            {"page": "Finance/Payroll"}))
    codes = [_code(control), _code(outside)]
    return [*codes, _code(inside)] if not granted else [_code(inside), *codes]


async def record_completeness() -> list[str | None]:
    docs = grant("g-docs", ALICE, "files", ["workspace", "docs"], ["read"], scope="descendants")
    world = workspace(docs)

    async def script(host: RuntimeHost) -> list[Any]:
        return [await host.call("files.read", {"path": "docs/a"}),
                await host.call("files.read", {"path": "payroll/b"}),
                await host.call("files.write", {"path": "docs/a"})]

    result, codes = await one_turn(world, script)
    assert result.status == "succeeded"
    types = [e.type for e in world.audit.events]
    assert types[:2] == ["authorization.checked", "turn.admitted"] and types[-1] == "turn.ended"
    invoked = world.audit_of("tool.invoked")
    assert [e.reason for e in invoked] == codes and all(e.operation_id for e in invoked)
    assert all(e.actor == ALICE and e.trace_id and e.purpose for e in world.audit.events)
    consumed = [e for e in world.audit_of("authorization.checked")
                if (e.metadata or {})["mode"] == "consume"]
    assert [(e.reason, e.resource and e.resource.path[-1]) for e in consumed] == [
        ("allowed", "alice"), ("allowed", "a"), ("no_matching_grant", "b")]  # turn, read, read
    return codes


async def replay_freshness() -> list[str | None]:
    world = workspace(READ_WS)

    async def script(host: RuntimeHost) -> list[Any]:
        def call(offset_ms: int) -> ToolCall:
            return tool_call("files.read", {"path": "a"}, requested_at=format_timestamp(
                T0 + timedelta(milliseconds=offset_ms)))

        return [await host.invoke_tool(call(0)), await host.invoke_tool(call(-1000))]

    _, codes = await one_turn(world, script)
    return codes


SCENARIOS: dict[tuple[str, str], tuple[Attempt, list[str | None]]] = {
    ("forged-grant", "baseline"): (forged_grant, [None, "invalid_tool_arguments",
                                                  "no_matching_grant"]),
    ("hidden-tool", "baseline"): (hidden_tool, [None, "tool_unavailable", "tool_unavailable",
                                                None]),
    ("read-to-mutation", "baseline"): (read_to_mutation, [None, "no_matching_grant"]),
    ("expired-grant", "read-grant-expired"): (expired_grant, [None, "no_matching_grant"]),
    ("replayed-grant", "grant-revoked"): (grant_revoked, [None, "no_matching_grant"]),
    ("replayed-grant", "ancestor-revoked"): (ancestor_revoked,
                                            [None, "delegation_chain_invalid"]),
    ("over-broad-delegation", "child-claims-more-than-its-parent"): (
        over_broad_delegation, [None, "delegation_chain_invalid"]),
    ("revoked-mid-turn", "revoked-while-the-first-turn-runs"): (
        revoked_mid_turn, [None, None, "no_matching_grant"]),
    ("expired-mid-turn", "expired-while-the-turn-runs"): (
        expired_mid_turn, [None, "no_matching_grant"]),
    ("namespace-crossing", "baseline"): (namespace_crossing,
                                         [None, "invalid_request", "invalid_request"]),
    ("bounded-grant", "single-use-write-grant"): (bounded_grant, [None, "grant_exhausted"]),
    ("usage-store-unavailable", "counter-unreachable"): (
        usage_store_unavailable, [None, "usage_store_unavailable"]),
    ("authority-unavailable", "outage-at-turn-boundary"): (
        authority_unavailable, [None, "authority_unavailable"]),
    ("tool-ceiling-escape", "baseline"): (tool_ceiling_escape,
                                          [None, "invalid_tool_requirement"]),
    ("invalid-tool-result", "baseline"): (invalid_tool_result, [None, "invalid_tool_result"]),
    ("budget-exceeded", "tool-call-ceiling"): (tool_call_ceiling,
                                               [None, "tool_call_limit_exceeded"]),
    ("budget-exceeded", "step-ceiling"): (step_ceiling, [None, None, "step_limit_exceeded"]),
    ("grant-material", "baseline"): (grant_material, [None, "no_grant_material_reachable"]),
    ("rollback-unavailable", "baseline"): (rollback_unavailable, [None, "tool_unavailable"]),
    ("escalation", "baseline"): (escalation, [None, "tool_unavailable", None,
                                              "escalation_requested"]),
    ("rollback-out-of-scope", "restore-confined-to-scratch"): (
        rollback_out_of_scope, [None, "no_matching_grant"]),
    ("broker-ungranted", "broker-unattached"): (
        lambda: broker(False, False), [None, "tool_unavailable", "tool_unavailable"]),
    ("broker-ungranted", "broker-attached-ungranted"): (
        lambda: broker(True, False), [None, "tool_unavailable", "tool_unavailable"]),
    ("broker-out-of-scope", "search-confined-to-one-page-tree"): (
        lambda: broker(True, True), [None, None, "no_matching_grant"]),
    ("record-completeness", "baseline"): (record_completeness,
                                          [None, "no_matching_grant", "tool_unavailable"]),
    ("replay-freshness", "baseline"): (replay_freshness, [None, "stale_request"]),
}


def test_every_row_is_built_or_declared_with_a_reason() -> None:
    rows = {(case, condition) for case, condition, _, _ in ROWS}
    assert len(ROWS) == 27 == len(rows)
    assert set(SCENARIOS) | set(DECLARED) == rows
    assert not set(SCENARIOS) & set(DECLARED)
    assert all(len(reason) > 20 for reason in DECLARED.values())


@pytest.mark.parametrize(("case", "condition", "outcome", "codes"),
                         [row for row in ROWS if row[:2] in SCENARIOS],
                         ids=[f"{r[0]}/{r[1]}" for r in ROWS if r[:2] in SCENARIOS])
async def test_row(case: str, condition: str, outcome: str, codes: tuple[str, ...]) -> None:
    scenario, expected = SCENARIOS[case, condition]
    observed = await scenario()
    assert observed == expected, outcome
    assert expected[0] is None  # every row carries a control that is let through
    refused = {code for code in observed if code is not None}
    assert set(codes) <= refused | {"invalid_tool_arguments"}, (codes, observed)
    assert refused - {"invalid_tool_arguments"} <= set(codes)
