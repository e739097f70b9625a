"""One escape for every model- or agent-chosen string a terminal shows.

Owns :func:`printable`. Ids, purposes, trace ids and reasons come from models and
agents; printed raw, a control character (ESC, CR, BEL, ...) or a bidirectional
override can rewrite or reorder what an operator sees. They are shown as
``\\uXXXX`` instead; everything else prints unchanged.
"""

from __future__ import annotations

import re
from typing import Final

__all__ = ["printable"]

_UNSAFE: Final = re.compile(
    "[\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069]")
"""C0/C1 controls, DEL, line/paragraph separators and the bidi marks, embeddings,
overrides and isolates."""


def printable(value: object) -> str:
    """``str(value)`` with control and bidi characters shown as ``\\uXXXX``."""
    return _UNSAFE.sub(lambda match: f"\\u{ord(match.group()):04x}", str(value))
