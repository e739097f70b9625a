"""What a runtime is handed: the :class:`RuntimeHost` members and nothing else.

Owns :class:`RuntimeFacade`. The turn's :class:`~.runtime_host.TurnHost` holds the
kernel, whose authorizer holds the grant source, the usage store and the audit
sink. A runtime must reach none of them (SharedOS: a runtime is handed no type
that carries authority), so it gets this facade instead: it has no instance
attributes at all (``__slots__`` holds only the weak-reference slot), and the
turn host it forwards to is found in a module-private weak map. Every member is
a method of the facade itself, so ``host.call.__self__`` is the facade again, and
results are contracts. Imports no I/O library.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any
from weakref import WeakKeyDictionary

from .contracts import JsonValue, ToolCall, ToolResult
from .runtime_host import TurnHost, TurnLimits

__all__ = ["RuntimeFacade"]

_HOSTS: WeakKeyDictionary[RuntimeFacade, TurnHost] = WeakKeyDictionary()


def _host(facade: RuntimeFacade) -> TurnHost:
    return _HOSTS[facade]


class RuntimeFacade:
    """The narrow :class:`~.runtime_host.RuntimeHost` a runtime receives for one turn.

    Args:
        host: the turn's host, kept out of the facade's reach.
    """

    __slots__ = ("__weakref__",)

    def __init__(self, host: TurnHost) -> None:
        _HOSTS[self] = host

    @property
    def limits(self) -> TurnLimits:
        """The turn's effective limits (its step budget and call ceiling)."""
        return _host(self).limits

    def declare_step(self) -> int:
        """Open the next step and return its index; see ``RuntimeHost.declare_step``."""
        return _host(self).declare_step()

    async def invoke_tool(self, call: ToolCall | Mapping[str, Any]) -> ToolResult:
        """Invoke one tool; refusals and failures are results.

        Raises:
            ContractError: ``call`` is a mapping that is not a valid ToolCall.
        """
        return await _host(self).invoke_tool(call)

    def annotate(self, key: str, value: JsonValue) -> None:
        """State one fact about the turn for its record; see ``RuntimeHost.annotate``.

        Raises:
            ContractError: ``key`` is empty or ``runtime``, or ``value`` is not JSON.
        """
        _host(self).annotate(key, value)

    async def call(self, tool: str, arguments: dict[str, Any]) -> ToolResult:
        """Build a ToolCall (fresh id, the turn's traceId, now) and invoke it.

        Raises:
            ContractError: ``tool`` or ``arguments`` are not valid in a ToolCall.
        """
        return await _host(self).call(tool, arguments)

    def __repr__(self) -> str:
        return "RuntimeFacade()"
