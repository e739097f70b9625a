"""The "tracing and metrics on" setting of the benchmark: the OpenTelemetry SDK with
every span sampled and batched to an exporter that drops it, and every metric
aggregated by an in-memory reader (what a process pays before its exporter's I/O).

``BENCH_OTEL=1`` in a worker process's environment turns it on there (``bench.app``).
"""

from __future__ import annotations

from collections.abc import Sequence

from sharedos_redis.observability import configure

__all__ = ["install_sdk"]


_installed = False


def install_sdk() -> None:
    """Install the SDK providers (once per process) and turn the hooks on.

    Raises:
        ModuleNotFoundError: ``opentelemetry-sdk`` is not installed.
    """
    global _installed
    if _installed:
        configure(True)
        return
    _installed = True
    from opentelemetry import metrics, trace
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader
    from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
    from opentelemetry.sdk.trace.export import (
        BatchSpanProcessor,
        SpanExporter,
        SpanExportResult,
    )

    class _Drop(SpanExporter):
        def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
            return SpanExportResult.SUCCESS

    provider = TracerProvider()
    provider.add_span_processor(BatchSpanProcessor(_Drop()))
    trace.set_tracer_provider(provider)
    metrics.set_meter_provider(MeterProvider(metric_readers=[InMemoryMetricReader()]))
    configure(True)
