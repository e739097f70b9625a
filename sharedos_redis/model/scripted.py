"""A model driver that plays a script: for users' tests and examples, no network.

Owns :class:`ScriptedDriver` and the builders :func:`reply` and :func:`tool_call`.
A script is either a list of responses played in order or a function that
decides from the request (the conversation so far), like a model would.
Imports no I/O library.
"""

from __future__ import annotations

import inspect
import itertools
import json
from collections.abc import Awaitable, Callable, Iterable
from typing import Any

from .names import wire_name
from .protocol import ModelRequest, ModelResponse, ModelToolCall

__all__ = ["Script", "ScriptedDriver", "reply", "tool_call"]

Script = Callable[[ModelRequest], ModelResponse | Awaitable[ModelResponse]]
"""A function that answers one model request, sync or async."""

_ids = itertools.count()


def tool_call(tool: str, arguments: dict[str, Any] | str, *,
              id: str | None = None) -> ModelToolCall:
    """A model's tool call: ``tool`` by its SharedOS name (sent under its wire alias).

    Args:
        tool: e.g. ``"messages.request"``.
        arguments: a dict (sent as JSON) or raw text, exactly as a model might write it.
        id: the provider call id (default ``call_<n>``).
    """
    text = arguments if isinstance(arguments, str) else json.dumps(arguments)
    return ModelToolCall(id=id or f"call_{next(_ids)}", name=wire_name(tool), arguments=text)


def reply(text: str = "", *calls: ModelToolCall, refusal: str | None = None) -> ModelResponse:
    """A model reply: final ``text``, or the ``calls`` it asks for (run in order)."""
    return ModelResponse(text=text, tool_calls=tuple(calls), refusal=refusal, model="scripted")


class ScriptedDriver:
    """A :class:`~sharedos_redis.model.protocol.ModelDriver` that follows a script.

    Args:
        script: responses to play in order, or a function of the request.

    Attributes:
        requests: every request it was given, in order (the model's view of the turn).
    """

    def __init__(self, script: Iterable[ModelResponse] | Script) -> None:
        self._play: Script
        if callable(script):
            self._play = script
        else:
            queue = list(script)

            def play(request: ModelRequest) -> ModelResponse:
                if not queue:
                    raise LookupError("the script has no response left")
                return queue.pop(0)

            self._play = play
        self.requests: list[ModelRequest] = []

    async def generate(self, request: ModelRequest) -> ModelResponse:
        """Answer ``request`` from the script."""
        self.requests.append(request)
        response = self._play(request)
        if inspect.isawaitable(response):
            response = await response
        return response
