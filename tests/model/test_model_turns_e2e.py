"""Model-driven delegation end to end: bob's model asks alice, alice's model answers.

The whole host path (grants in Redis, accept script, relay, alice's turn under
her own grants, reply settlement) on fakeredis and on real Redis, with three
model seams: the scripted driver, the OpenAI-compatible driver and the
Anthropic driver on mocked HTTP. The transcript is read back from what each
model was sent and from the audit stream.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import anyio
import pytest
from redis.asyncio import Redis

from sharedos_redis.kernel.contracts import AuditEvent
from sharedos_redis.model import (
    ModelDriver,
    ModelRequest,
    ModelResponse,
    ScriptedDriver,
    StandardRuntime,
    ToolResultMessage,
    reply,
    tool_call,
)
from sharedos_redis.worker.host import AgentSpec, MessagingHost
from sharedos_redis.worker.local import LocalWorker
from sharedos_redis.worker.settings import HostSettings
from tests.worker.helpers import (
    OWNER,
    grant,
    invoke_grant,
    put,
    read_file_handler,
    send_grant,
    tool,
)

from .providers import (
    FakeProvider,
    anthropic_driver,
    anthropic_message,
    chat_completion,
    openai_driver,
)

pytestmark = pytest.mark.anyio

ASK_ALICE = {"recipient": {"kind": "agent", "agentId": "alice"},
             "payload": {"question": "What is the Atlas status?"}}


def agent_of(system: str) -> str:
    return "bob" if "agent bob" in system else "alice"


def scripted_model(request: ModelRequest) -> ModelResponse:
    """Bob asks alice and reports her answer; alice reads the file and answers."""
    results = [json.loads(m.content) for m in request.messages
               if isinstance(m, ToolResultMessage)]
    if agent_of(request.system) == "bob":
        if not results:
            return reply("", tool_call("messages.request", ASK_ALICE))
        return reply(f"Alice says: {results[0]['output']}")
    if not results:
        return reply("", tool_call("files.read", {"path": "atlas.md"}))
    return reply(f"Atlas is green ({results[0]['output']['text']})")


def openai_model(body: dict[str, Any]) -> dict[str, Any]:
    tools = [json.loads(m["content"]) for m in body["messages"] if m["role"] == "tool"]
    bob = agent_of(body["messages"][0]["content"]) == "bob"
    if not tools:
        name, args = ("messages_request", ASK_ALICE) if bob else ("files_read", {"path": "a"})
        return chat_completion(None, ("call_0", name, json.dumps(args)))
    text = f"Alice says: {tools[0]['output']}" if bob else \
        f"Atlas is green ({tools[0]['output']['text']})"
    return chat_completion(text)


def anthropic_model(body: dict[str, Any]) -> dict[str, Any]:
    results = [json.loads(block["content"]) for m in body["messages"] if m["role"] == "user"
               and isinstance(m["content"], list) for block in m["content"]]
    bob = agent_of(body["system"]) == "bob"
    if not results:
        name, args = ("messages_request", ASK_ALICE) if bob else ("files_read", {"path": "a"})
        return anthropic_message(None, ("toolu_0", name, args))
    text = f"Alice says: {results[0]['output']}" if bob else \
        f"Atlas is green ({results[0]['output']['text']})"
    return anthropic_message(text)


def scripted() -> tuple[ModelDriver, Callable[[], list[str]]]:
    driver = ScriptedDriver(scripted_model)
    return driver, lambda: [r.system for r in driver.requests]


def via_openai() -> tuple[ModelDriver, Callable[[], list[str]]]:
    provider = FakeProvider(openai_model)
    return openai_driver(provider), lambda: [b["messages"][0]["content"] for b in provider.bodies]


def via_anthropic() -> tuple[ModelDriver, Callable[[], list[str]]]:
    provider = FakeProvider(anthropic_model)
    return anthropic_driver(provider), lambda: [b["system"] for b in provider.bodies]



async def audit(host: MessagingHost) -> list[AuditEvent]:
    return [event for _, event in await host.audit.read(host.namespace, count=10_000)]


@pytest.mark.parametrize("seam", [scripted, via_openai, via_anthropic],
                         ids=["scripted", "openai", "anthropic"])
async def test_bobs_model_asks_alices_model_and_answers(
        redis: Redis, ns: str, cleanup: None,
        seam: Callable[[], tuple[ModelDriver, Callable[[], list[str]]]]) -> None:
    driver, systems = seam()
    runtime = StandardRuntime(driver, instructions="Answer briefly.")
    agents = {name: AgentSpec(runtime, authority=OWNER, owner=OWNER,
                              tool_namespaces=("messages", "files")) for name in ("bob", "alice")}
    host = MessagingHost(redis, namespace=ns, agents=agents, settings=HostSettings(
        request_timeout_s=10, turn_timeout_s=8, lease_s=5, reconcile_interval_s=0.2))
    host.register_tool(tool("files.read", "files", ("atlas",)), read_file_handler)
    await put(host, send_grant(ns, "bob", "alice"), invoke_grant(ns, "bob"),
              invoke_grant(ns, "alice"), grant(ns, "alice", "files", ("atlas",), "read"))
    async with host, LocalWorker(host):
        with anyio.fail_after(15):
            result = await host.start_turn("bob", {"tick": 1}, purpose="atlas-status")

    # the final answer: bob's model read alice's reply, which her model wrote
    assert result.status == "succeeded", result
    assert result.output == "Alice says: Atlas is green (read by alice)"
    # the model's tool call, as the host recorded it
    [bob_call] = [e.data for e in result.events if e.type == "tool.invoked"]
    assert isinstance(bob_call, dict)
    assert bob_call == {"callId": bob_call["callId"], "tool": "messages.request",
                        "status": "succeeded", "step": 0}
    # the authorization of that call, and alice's turn under her own grants
    events = await audit(host)
    sends = [e for e in events if e.type == "authorization.checked" and e.action == "send"]
    assert [(e.actor.id, e.outcome, e.resource.path if e.resource else None) for e in sends] \
        == [("bob", "allowed", ("agent", "alice"))]
    reads = {(e.actor.id, e.outcome) for e in events
             if e.type == "authorization.checked" and e.action == "read"}
    assert ("alice", "allowed") in reads and ("bob", "allowed") not in reads
    assert [e.type for e in events if e.type in ("message.accepted", "turn.admitted",
                                                 "reply.settled")] \
        == ["turn.admitted", "message.accepted", "turn.admitted", "reply.settled"]
    # what each model was told: its own identity and the purpose, never a grant
    assert sorted(agent_of(s) for s in systems()) == ["alice", "alice", "bob", "bob"]
    assert all("atlas-status" in s and "grant" not in s.lower() for s in systems())
    assert await host.router.pending(ns) == []
