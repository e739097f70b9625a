"""The session's OpenTelemetry SDK (see ``tests/otel_sdk.py``)."""

from __future__ import annotations

from ..otel_sdk import Sdk, sdk

__all__ = ["Sdk", "sdk"]
