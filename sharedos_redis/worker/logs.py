"""Log configuration for the ``sharedos-redis`` command line: text or JSON lines on stderr.

The library itself only logs (to ``sharedos_redis.*`` loggers); applications that
embed it configure logging their own way. Structured fields a record carries (the
per-turn line's ``turn`` mapping: namespace, agent, message id, attempt, outcome,
duration) become JSON keys in ``json`` format.
"""

from __future__ import annotations

import json
import logging
import sys
from datetime import UTC, datetime
from typing import Final, Literal

__all__ = ["LogFormat", "configure_logging"]

LogFormat = Literal["text", "json"]

_STRUCTURED: Final = ("turn",)


class _JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, object] = {
            "ts": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname, "logger": record.name, "msg": record.getMessage()}
        for key in _STRUCTURED:
            value = getattr(record, key, None)
            if value is not None:
                line[key] = value
        if record.exc_info:
            line["exc"] = self.formatException(record.exc_info)
        return json.dumps(line, default=str)


def configure_logging(level: str = "INFO", fmt: LogFormat = "text") -> None:
    """Send every log record at ``level`` or above to stderr, as text or JSON lines."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(_JsonFormatter() if fmt == "json" else logging.Formatter(
        "%(asctime)s %(levelname)s %(name)s: %(message)s", "%H:%M:%S"))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
