"""The OpenTelemetry SDK of the test process: one tracer and one meter provider for the
session (OpenTelemetry allows setting each only once), cleared before every test.
The meter provider has an in-memory reader and a Prometheus reader, so the console's
``/metrics`` and the metric assertions read the same instruments."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import pytest
from opentelemetry import metrics, trace
from opentelemetry.exporter.prometheus import PrometheusMetricReader
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from sharedos_redis.observability import Telemetry, configure

__all__ = ["Sdk", "sdk"]


@dataclass
class Sdk:
    spans: InMemorySpanExporter
    metrics: InMemoryMetricReader


_SDK: Sdk | None = None


def _sdk() -> Sdk:
    global _SDK
    if _SDK is None:
        exporter, reader = InMemorySpanExporter(), InMemoryMetricReader()
        provider = TracerProvider()
        provider.add_span_processor(SimpleSpanProcessor(exporter))
        trace.set_tracer_provider(provider)
        metrics.set_meter_provider(MeterProvider(
            metric_readers=[reader, PrometheusMetricReader()]))
        _SDK = Sdk(exporter, reader)
    return _SDK


@pytest.fixture
def sdk() -> Iterator[Sdk]:
    """The in-memory span exporter and metric reader, OpenTelemetry hooks on."""
    found = _sdk()
    found.spans.clear()
    found.metrics.get_metrics_data()  # drain what earlier tests recorded (deltas are not kept)
    hooks: Telemetry = configure(True)
    assert hooks.enabled
    yield found
    found.spans.clear()
    # the providers stay for the session: later tests run the no-op hooks, so their
    # spans do not pile up in the in-memory exporter
    configure(False)
