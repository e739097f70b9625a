"""Make any text inert for display: control, format (bidi), separator and surrogate
characters become visible ``\\uXXXX`` escapes before HTML escaping.

Every string the console prints goes through :func:`inert` (the Jinja environment's
``finalize``), so an agent id like ``"<script>\\u202e\\x1b[31m"`` shows as its
characters and can neither run, reorder the text around it nor drive a terminal.
Pure.
"""

from __future__ import annotations

import unicodedata
from typing import Final

__all__ = ["inert"]

_UNSAFE: Final = frozenset({"Cc", "Cf", "Cs", "Co", "Cn", "Zl", "Zp"})


def _escape(char: str) -> str:
    code = ord(char)
    return f"\\u{code:04x}" if code <= 0xFFFF else f"\\U{code:08x}"


def inert(value: object) -> str:
    """``value`` as text with every unsafe character escaped (``None`` → ``""``)."""
    if value is None:
        return ""
    text = value if isinstance(value, str) else str(value)
    if text.isascii() and text.isprintable():  # the common case: nothing to do
        return text
    return "".join(_escape(c) if unicodedata.category(c) in _UNSAFE else c for c in text)
