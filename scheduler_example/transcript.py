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

    def tool(self, who: str, target: str, purpose: str, result: ToolResult) -> None:
        """Record one tool call of ``who`` towards ``target``."""
        if result.status == "succeeded":
            shown = json.dumps(result.output, separators=(",", ":"))
            shown = shown if len(shown) <= 110 else shown[:107] + "..."
            self.say(f"    {who} -> {target} [{purpose}]: ok {shown}")
        else:
            detail = result.error.details or {}
            extra = f" ({detail['outcome']})" if "outcome" in detail else ""
            self.say(f"    {who} -> {target} [{purpose}]: {result.status} "
                     f"{result.error.code}{extra}")
