"""Prometheus exposition of this process's OpenTelemetry metrics (the ``metrics`` extra).

:func:`serve_prometheus` installs an SDK ``MeterProvider`` whose reader is a
``PrometheusMetricReader`` and serves ``/metrics`` on its own port (the worker's
``--metrics-port``); the console serves :func:`prometheus_text` on its ``/metrics``.
Needs ``opentelemetry-sdk`` and ``opentelemetry-exporter-prometheus``.
"""

from __future__ import annotations

from .hooks import configure

__all__ = ["install_prometheus", "prometheus_text", "serve_prometheus"]

_installed = False


def install_prometheus() -> None:
    """Install an SDK meter provider with a Prometheus reader and turn the OpenTelemetry
    hooks on. An application that already installed an SDK meter provider keeps it
    (give it a ``PrometheusMetricReader`` yourself: OpenTelemetry sets one per process).

    Raises:
        ModuleNotFoundError: the ``metrics`` extra is not installed.
    """
    global _installed
    from opentelemetry import metrics
    from opentelemetry.exporter.prometheus import PrometheusMetricReader
    from opentelemetry.sdk.metrics import MeterProvider

    if not _installed and not isinstance(metrics.get_meter_provider(), MeterProvider):
        metrics.set_meter_provider(MeterProvider(metric_readers=[PrometheusMetricReader()]))
    _installed = True
    configure(True)


def serve_prometheus(port: int, host: str = "127.0.0.1") -> None:
    """:func:`install_prometheus`, then serve ``/metrics`` on ``host:port`` (a thread).

    Raises:
        ModuleNotFoundError: the ``metrics`` extra is not installed.
        OSError: the port is taken.
    """
    from prometheus_client import start_http_server

    install_prometheus()
    start_http_server(port, addr=host)


def prometheus_text() -> tuple[bytes, str]:
    """The current exposition and its content type."""
    from prometheus_client import CONTENT_TYPE_LATEST, REGISTRY, generate_latest

    return generate_latest(REGISTRY), CONTENT_TYPE_LATEST
