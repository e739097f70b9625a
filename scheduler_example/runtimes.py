"""Scripted, deterministic agent runtimes (no model, no network).

Each runtime implements the package's runtime protocol: ``run(turn, host)``
gets a frozen TurnRequest (the message, the permission-filtered tools, the
attempt number) and a RuntimeHost whose ``call``/``invoke_tool`` is the only
way to act. Bob and alice are model-driven instead: see :mod:`.models`.
"""

from __future__ import annotations

from sharedos_redis.kernel.contracts import JsonValue, ToolResult
from sharedos_redis.kernel.turn import RuntimeHost, TurnRequest

from .transcript import Transcript

__all__ = ["Asker", "Carol", "PingPong"]


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
