"""What a person reads: one line per delegation, with the outcome or refusal code."""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from sharedos_redis.kernel.contracts import ToolResult

__all__ = ["Transcript"]


@dataclass
class Transcript:
    """Collects lines in order; ``echo`` prints them as they come."""

    echo: bool = True
    lines: list[str] = field(default_factory=list)

    def say(self, line: str) -> None:
        """Add one line."""
        self.lines.append(line)
        if self.echo:
            print(line, flush=True)

    def ask(self, who: str, target: str, purpose: str, depth: int = 0) -> None:
        """Record that ``who`` is about to call ``target``."""
        self.say(f"    {'  ' * depth}{who} -> {target} [{purpose}]")

    def tool(self, who: str, target: str, purpose: str, result: ToolResult,
             depth: int = 0) -> None:
        """Record what ``who``'s call towards ``target`` came back with."""
        pad = "  " * depth
        if result.status == "succeeded":
            shown = json.dumps(result.output, separators=(",", ":"))
            shown = shown if len(shown) <= 100 else shown[:97] + "..."
            self.say(f"    {pad}{who} <- {target}: ok {shown}")
        else:
            detail = result.error.details or {}
            extra = f" ({detail['outcome']})" if "outcome" in detail else ""
            self.say(f"    {pad}{who} <- {target}: {result.status} {result.error.code}{extra}")
