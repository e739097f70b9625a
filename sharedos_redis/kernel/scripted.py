"""A runtime built from one async function, for tests and examples.

Owns :class:`ScriptedRuntime`. Imports no I/O library.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from .contracts import JsonValue
from .runtime_host import RuntimeHost, TurnRequest

__all__ = ["Script", "ScriptedRuntime"]

Script = Callable[[TurnRequest, RuntimeHost], Awaitable[JsonValue]]
"""An async function that plays one turn: ``await script(turn, host)``."""


class ScriptedRuntime:
    """A :class:`~sharedos_redis.kernel.turn.RuntimePlugin` that runs ``script``.

    Args:
        script: the turn logic; its return value is the turn's output and an
            exception fails the turn (``runtime_failed``).

    Attributes:
        runs: how many turns were started (a refused turn never starts one).
    """

    def __init__(self, script: Script) -> None:
        self._script = script
        self.runs = 0

    async def run(self, turn: TurnRequest, host: RuntimeHost) -> JsonValue:
        """Play one turn with ``script``."""
        self.runs += 1
        return await self._script(turn, host)
