"""A session-wide collector of fault-by-outcome rows, printed by ``conftest.py``."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["ROWS", "Row", "table"]


@dataclass(frozen=True)
class Row:
    """One injected fault (or scenario) and what became of its requests."""

    fault: str
    requests: int
    settled: int
    lost: int
    duplicated: int
    states: str
    seen_by: str


ROWS: list[Row] = []


def table(rows: list[Row]) -> list[str]:
    """The rows as aligned text lines, with a header."""
    head = ("fault injected", "requests", "settled", "lost", "duplicated", "terminal states",
            "outcome seen by")
    cells = [head, *((r.fault, str(r.requests), str(r.settled), str(r.lost), str(r.duplicated),
                      r.states, r.seen_by) for r in rows)]
    widths = [max(len(c[i]) for c in cells) for i in range(len(head))]
    return ["  ".join(c[i].ljust(widths[i]) for i in range(len(head))) for c in cells]
