"""The read-only web console (``pip install sharedos-redis[console]``).

``sharedos-redis console --port 8080`` serves it; :func:`create_app` builds the
Starlette app for embedding. Imports Starlette and Jinja2 only when used.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .app import ConsoleSettings, create_app

__all__ = ["ConsoleSettings", "create_app"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        from . import app

        return getattr(app, name)
    raise AttributeError(name)
