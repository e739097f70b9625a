"""The running turn's identity, which makes what it causes deterministic and fenced.

Owns ``TurnScope``, ``current_turn``, ``turn_scope`` and the derived ids. The worker
opens a scope while a recipient's turn runs (one per attempt); inside it:

- the k-th ``messages.request`` the turn starts gets the id ``child_id(parent, k)``
  (:func:`request_id`, the host's message id factory): attempt 2 of a turn re-issuing
  the same call names the same nested request, so the accept re-attaches to it
  instead of accepting a second one (ADR 0028 ``childOperationId``);
- the k-th call of a host tool gets the idempotency key ``tool_key(parent, name, k)``,
  stable across attempts, so a handler can deduplicate its own side effects;
- ``attempt`` is the fencing token: an effect carries it and is refused when the
  request's current attempt has moved on; ``turn_id`` is fresh per attempt (ADR 0027
  turn lease isolation).

Outside a turn (a root request from the app) ids are random. Context variables follow
anyio tasks. Imports no redis.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field

from ..kernel.ids import new_id

__all__ = ["TurnScope", "child_id", "current_turn", "request_id", "tool_key", "turn_scope"]


def _derived(*parts: str) -> str:
    digest = hashlib.sha256("\x00".join(("sharedos-redis", *parts)).encode("utf-8"))
    return digest.hexdigest()[:32]


def child_id(parent_id: str, k: int) -> str:
    """The id of the ``k``-th request (1-based) made by a turn of request ``parent_id``."""
    return _derived("request", parent_id, str(k))


def tool_key(parent_id: str, tool: str, k: int) -> str:
    """The idempotency key of the ``k``-th call (1-based) of ``tool`` in a turn of ``parent_id``."""
    return _derived("tool", parent_id, tool, str(k))


@dataclass
class TurnScope:
    """One attempt of one recipient turn: what its effects are derived from and fenced by.

    Attributes:
        namespace: the request's namespace.
        request_id: the request the turn answers (the parent of its nested requests).
        attempt: the attempt number holding the lease (the fencing token).
        turn_id: a fresh identity per attempt (never shared between attempts).
    """

    namespace: str
    request_id: str
    attempt: int
    turn_id: str = field(default_factory=new_id)
    requests: int = 0
    tool_calls: dict[str, int] = field(default_factory=dict)

    def next_request_id(self) -> str:
        """The id of the next ``messages.request`` this turn starts."""
        self.requests += 1
        return child_id(self.request_id, self.requests)

    def next_tool_key(self, tool: str) -> str:
        """The idempotency key of the next call of ``tool`` in this turn."""
        k = self.tool_calls[tool] = self.tool_calls.get(tool, 0) + 1
        return tool_key(self.request_id, tool, k)


current_turn: ContextVar[TurnScope | None] = ContextVar("current_turn", default=None)
"""The running turn's scope; None outside a turn."""


@contextmanager
def turn_scope(scope: TurnScope) -> Iterator[TurnScope]:
    """Run the block as ``scope``'s turn."""
    token = current_turn.set(scope)
    try:
        yield scope
    finally:
        current_turn.reset(token)


def request_id() -> str:
    """The host's message id factory: derived inside a turn, random outside one."""
    scope = current_turn.get()
    return new_id() if scope is None else scope.next_request_id()
