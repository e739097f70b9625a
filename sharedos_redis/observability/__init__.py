"""Observability: OpenTelemetry traces and metrics (optional), gauges read from Redis.

``pip install sharedos-redis[otel]`` adds ``opentelemetry-api``; then every host in
the process records spans and metrics through the API (install and configure the
OpenTelemetry SDK in your application to export them). Without the extra, or with
``OTEL_SDK_DISABLED=true``, every hook is a no-op. Span, attribute and metric
names are in :mod:`.names`; denial buckets in :mod:`.buckets`.
"""

from __future__ import annotations

from .buckets import BUCKETS, Bucket, bucket_of
from .hooks import SpanHandle, Telemetry, configure, telemetry

__all__ = ["BUCKETS", "Bucket", "SpanHandle", "Telemetry", "bucket_of", "configure",
           "telemetry"]
