"""Trusted identifier factories for the kernel.

Owns ``new_id``, the default id factory for message ids, audit event ids and
operation ids. Ids minted here are trusted because only the host calls it; a
model-authored value (a tool-call id, a payload field) is never used as one.
Imports nothing of ours.
"""

from __future__ import annotations

import uuid

__all__ = ["new_id"]


def new_id() -> str:
    """Return a fresh random identifier (32 lowercase hex characters of a uuid4)."""
    return uuid.uuid4().hex
