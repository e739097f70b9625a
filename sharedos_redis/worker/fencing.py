"""Fenced host tool calls and the call scope a tool handler reads (:func:`current_call`).

A turn's attempt is its fencing token. Before a host tool handler runs inside a worker
turn, one read checks that this attempt still runs the request (state ``running``,
``attempts`` = the attempt); when another attempt has taken it over (this one's loop
was blocked past its lease, say) the call fails ``turn_lease_lost`` and the handler
never runs. The kernel audits the call (``tool.invoked``, outcome ``failed``, reason
``turn_lease_lost``) like any other.

The handler then runs with a :class:`ToolCallScope`: the idempotency key of the call
(the k-th call of that tool in a turn of that request has the same key in every
attempt, so the handler can deduplicate its own side effect) and the attempt, to pass
on to external systems that fence too.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from contextvars import ContextVar
from dataclasses import dataclass

from ..kernel.contracts import AccessContext, ToolCall, format_timestamp
from ..kernel.tools import ToolHandler, tool_failed
from ..transport.turn_scope import current_turn

__all__ = ["ToolCallScope", "current_call", "fenced_handler"]

log = logging.getLogger("sharedos_redis.worker")

LeaseCheck = Callable[[str, str, int], Awaitable[bool]]
"""``(namespace, request id, attempt)`` → whether that attempt still runs the request."""


@dataclass(frozen=True)
class ToolCallScope:
    """What a host tool handler knows about the call it runs (:func:`current_call`).

    Attributes:
        idempotency_key: stable for the k-th call of this tool in a turn of this
            request, whatever the attempt: deduplicate a side effect on it. Outside a
            worker turn (a root turn run in-process) it is the call's own id.
        attempt: the fencing token (the turn's attempt number); None outside a
            worker turn. Hand it to systems that can refuse a stale writer.
        turn_id: the attempt's own identity (fresh per attempt; None outside a turn).
        request_id: the request the turn answers (None outside a worker turn).
    """

    idempotency_key: str
    attempt: int | None = None
    turn_id: str | None = None
    request_id: str | None = None


_call: ContextVar[ToolCallScope | None] = ContextVar("sharedos_tool_call", default=None)


def current_call() -> ToolCallScope | None:
    """The scope of the host tool call being handled; None outside a tool handler."""
    return _call.get()


def fenced_handler(handler: ToolHandler, holds_lease: LeaseCheck) -> ToolHandler:
    """``handler``, run only while the calling attempt holds the turn lease, with its
    :class:`ToolCallScope` set (see the module docstring)."""

    async def fenced(context: AccessContext, call: ToolCall) -> object:
        turn = current_turn.get()
        if turn is None:
            scope = ToolCallScope(idempotency_key=call.id)
        else:
            scope = ToolCallScope(idempotency_key=turn.next_tool_key(call.tool),
                                  attempt=turn.attempt, turn_id=turn.turn_id,
                                  request_id=turn.request_id)
            if not await holds_lease(turn.namespace, turn.request_id, turn.attempt):
                log.warning("turn %s/%s attempt %d: tool %s refused, another attempt runs "
                            "the request or it ended (%s)", turn.namespace, turn.request_id,
                            turn.attempt, call.tool, "turn_lease_lost")
                return tool_failed(call, format_timestamp(), "turn_lease_lost")
        token = _call.set(scope)
        try:
            return await handler(context, call)
        finally:
            _call.reset(token)

    return fenced
