"""Tool names as a model provider can carry them, and back (SharedOS ADR 0014).

Owns :class:`ToolNameCodec` and :func:`wire_name`. OpenAI- and Anthropic-style
APIs accept function names matching ``^[a-zA-Z0-9_-]{1,64}$``; SharedOS tool
names are dotted (``messages.request``). Dots become underscores on the way
out; the turn's own catalogue maps them back, so an offered tool round-trips
exactly. A name the catalogue does not hold is decoded best-effort and passed
on, so a model that invents a tool still reaches the host and is refused
``tool_unavailable`` (and counted) rather than vanishing here. The alias never
reaches a ToolCall. Imports no I/O library.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Final

from ..errors import ConfigurationError

__all__ = ["WIRE_NAME", "ToolNameCodec", "wire_name"]

WIRE_NAME: Final = re.compile(r"[a-zA-Z0-9_-]{1,64}")
"""What a provider accepts as a function name (checked with ``fullmatch``)."""


def wire_name(name: str) -> str:
    """The provider-safe alias of a SharedOS tool name (dots become underscores)."""
    return name.replace(".", "_")


class ToolNameCodec:
    """The per-turn map between catalogue names and wire names.

    Args:
        names: the turn's offered tool names.

    Raises:
        ConfigurationError: a name has no provider-safe alias, or two names share
            one (a call could be routed to the wrong tool).
    """

    def __init__(self, names: Iterable[str]) -> None:
        self._to_wire: dict[str, str] = {}
        self._from_wire: dict[str, str] = {}
        for name in names:
            alias = wire_name(name)
            if not WIRE_NAME.fullmatch(alias):
                raise ConfigurationError(f"tool {name!r} has no name a model provider accepts")
            clash = self._from_wire.get(alias)
            if clash is not None and clash != name:
                raise ConfigurationError(f"tools {clash!r} and {name!r} share the alias {alias!r}")
            self._to_wire[name], self._from_wire[alias] = alias, name

    def to_wire(self, name: str) -> str:
        """The wire name of an offered tool."""
        return self._to_wire.get(name) or wire_name(name)

    def from_wire(self, alias: str) -> str:
        """The catalogue name for ``alias``; an unknown alias is decoded best-effort."""
        return self._from_wire.get(alias) or alias.replace("_", ".")
