"""A span exporter that appends one JSON line per finished span (worker processes in tests).

Every line: name, trace/span/parent ids (hex), kind, status, attributes and the
exporting process's pid, so a test can rebuild one trace across processes.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult

__all__ = ["JsonLinesSpanExporter", "read_spans", "span_record"]


def span_record(span: ReadableSpan) -> dict[str, Any]:
    """The JSON-able record of one finished span."""
    ctx, parent = span.get_span_context(), span.parent
    assert ctx is not None
    return {
        "name": span.name, "trace_id": f"{ctx.trace_id:032x}", "span_id": f"{ctx.span_id:016x}",
        "parent_id": f"{parent.span_id:016x}" if parent is not None else None,
        "kind": span.kind.name, "status": span.status.status_code.name,
        "status_description": span.status.description,
        "attributes": dict(span.attributes or {}), "events": len(span.events),
        "pid": os.getpid(),
    }


class JsonLinesSpanExporter(SpanExporter):
    """Appends finished spans to ``path`` (one short write per span)."""

    def __init__(self, path: str | Path) -> None:
        self._path = Path(path)

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        lines = "".join(json.dumps(span_record(span)) + "\n" for span in spans)
        with self._path.open("a", encoding="utf-8") as handle:
            handle.write(lines)
        return SpanExportResult.SUCCESS

    def shutdown(self) -> None:
        return None


def read_spans(path: Path) -> list[dict[str, Any]]:
    """Every complete line written so far."""
    if not path.exists():
        return []
    text = path.read_text(encoding="utf-8")
    return [json.loads(line) for line in text.splitlines() if line.endswith("}")]
