"""Scripted, deterministic agent runtimes (no model, no network).

Each runtime implements the package's runtime protocol: ``run(turn, host)``
gets a frozen TurnRequest (the message, the permission-filtered tools, the
attempt number) and a RuntimeHost whose ``call``/``invoke_tool`` is the only
way to act. A real model plugs in at the same seam — see :class:`ModelRuntime`.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from sharedos_redis.kernel.contracts import JsonValue, ToolResult
from sharedos_redis.kernel.turn import RuntimeHost, TurnRequest

from .transcript import Transcript

__all__ = ["Alice", "Asker", "Carol", "ModelRuntime", "PingPong"]


def _outcome(result: ToolResult) -> JsonValue:
    """What a runtime learns from a tool result: the output, or the refusal code."""
    if result.status == "succeeded":
        return result.output
    return {"refused": result.error.code}


class Asker:
    """Ask one agent one question (bob's heartbeat; eve's attempt, which is refused)."""

    def __init__(self, me: str, target: str, question: str, transcript: Transcript) -> None:
        self.me, self.target, self.question = me, target, question
        self.transcript = transcript

    async def run(self, turn: TurnRequest, host: RuntimeHost) -> JsonValue:
        self.transcript.ask(self.me, self.target, turn.purpose)
        result = await host.call("messages.request", {
            "recipient": {"kind": "agent", "agentId": self.target},
            "payload": {"question": self.question},
        })
        self.transcript.tool(self.me, self.target, turn.purpose, result)
        return _outcome(result)


class Alice:
    """Alice answers from the file store she may read, after consulting carol."""

    def __init__(self, transcript: Transcript) -> None:
        self.transcript = transcript

    async def run(self, turn: TurnRequest, host: RuntimeHost) -> JsonValue:
        status = await host.call("files.read", {"path": "atlas.md"})
        self.transcript.tool("alice", "files.read", turn.purpose, status, depth=1)
        self.transcript.ask("alice", "carol", turn.purpose, depth=1)
        note = await host.call("messages.request", {
            "recipient": {"kind": "agent", "agentId": "carol"},
            "payload": {"question": "Anything to add on Atlas?"},
        })
        self.transcript.tool("alice", "carol", turn.purpose, note, depth=1)
        return {"status": _outcome(status), "carol": _outcome(note)}


class Carol:
    """Carol answers alice with a fixed note."""

    async def run(self, turn: TurnRequest, host: RuntimeHost) -> JsonValue:
        return {"note": "design review moved to Thursday"}


class PingPong:
    """Two agents that keep asking each other; the trace budget stops them."""

    def __init__(self, me: str, other: str, transcript: Transcript) -> None:
        self.me, self.other, self.transcript = me, other, transcript

    async def run(self, turn: TurnRequest, host: RuntimeHost) -> JsonValue:
        depth = turn.message.payload.get("hop", 0) if isinstance(turn.message.payload,
                                                                  dict) else 0
        self.transcript.ask(self.me, self.other, turn.purpose, depth=depth)
        result = await host.call("messages.request", {
            "recipient": {"kind": "agent", "agentId": self.other},
            "payload": {"ball": self.me, "hop": depth + 1},
        })
        self.transcript.tool(self.me, self.other, turn.purpose, result, depth=depth)
        return _outcome(result)


class ModelRuntime:
    """The seam for a real model's tool loop (no model library is a dependency).

    ``complete`` is your model call: it gets the conversation so far and the
    offered tool definitions, and returns either ``{"tool": name, "arguments":
    {...}}`` or ``{"final": value}``. Every tool call goes through
    ``host.call``, which authorizes it against *this* agent's grants; the
    model cannot author a sender, purpose, trace or message id — the
    ``messages.request`` arguments schema accepts only ``recipient`` and
    ``payload``.
    """

    def __init__(self, complete: Callable[[list[dict[str, Any]], list[dict[str, Any]]],
                                          Awaitable[dict[str, Any]]], max_steps: int = 8) -> None:
        self.complete, self.max_steps = complete, max_steps

    async def run(self, turn: TurnRequest, host: RuntimeHost) -> JsonValue:
        tools = [tool.to_wire() for tool in turn.tools]
        history: list[dict[str, Any]] = [{"role": "user", "content": turn.message.payload}]
        for _ in range(self.max_steps):
            step = await self.complete(history, tools)
            if "final" in step:
                final: JsonValue = step["final"]
                return final
            result = await host.call(step["tool"], step.get("arguments", {}))
            history.append({"role": "tool", "content": result.to_wire()})
        return {"stopped": "max_steps"}
