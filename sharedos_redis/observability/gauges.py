"""Gauges read from Redis (pending by state, dead letters, outbox depth, relay lag,
workers seen): OpenTelemetry observable gauges over a snapshot the caller refreshes.

Observable callbacks are synchronous and cannot await Redis, so a reader (the
console's ``/metrics``) refreshes the snapshot first, then collects.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Protocol

from . import names as n

__all__ = ["NamespaceSnapshot", "register_gauges"]


class NamespaceSnapshot(Protocol):
    """What the gauges read about one namespace."""

    @property
    def namespace(self) -> str: ...
    @property
    def pending_by_state(self) -> Mapping[str, int]: ...
    @property
    def outbox_depth(self) -> int: ...
    @property
    def relay_lag_s(self) -> float: ...
    @property
    def dead_letters(self) -> int: ...
    @property
    def workers_seen(self) -> Sequence[str]: ...


_sources: list[Callable[[], Iterable[NamespaceSnapshot]]] = []


def _snapshots() -> list[NamespaceSnapshot]:
    return [snapshot for source in _sources for snapshot in source()]


def register_gauges(snapshot: Callable[[], Iterable[NamespaceSnapshot]]) -> None:
    """Add ``snapshot`` to what the gauges report; the gauges themselves are registered
    on the ``sharedos_redis`` meter once per process (OpenTelemetry keeps the first
    instrument of a name).

    Raises:
        ModuleNotFoundError: ``opentelemetry-api`` is not installed.
    """
    from opentelemetry import metrics
    from opentelemetry.metrics import CallbackOptions, Observation

    _sources.append(snapshot)
    if len(_sources) > 1:
        return

    def pending(options: CallbackOptions) -> Iterable[Observation]:
        return [Observation(count, {n.NAMESPACE: s.namespace, n.STATE: state})
                for s in _snapshots() for state, count in s.pending_by_state.items()]

    def each(read: Callable[[NamespaceSnapshot], float]) -> Callable[..., Iterable[Observation]]:
        def observe(options: CallbackOptions) -> Iterable[Observation]:
            return [Observation(read(s), {n.NAMESPACE: s.namespace}) for s in _snapshots()]
        return observe

    meter = metrics.get_meter("sharedos_redis")
    meter.create_observable_gauge(n.PENDING, [pending], unit="{request}",
                                  description="open requests by state")
    meter.create_observable_gauge(n.DEAD_LETTERS, [each(lambda s: s.dead_letters)],
                                  unit="{request}", description="dead-letter entries")
    meter.create_observable_gauge(n.OUTBOX_DEPTH, [each(lambda s: s.outbox_depth)],
                                  unit="{request}", description="undispatched outbox entries")
    meter.create_observable_gauge(n.OUTBOX_AGE, [each(lambda s: s.relay_lag_s)], unit="s",
                                  description="age of the oldest undispatched outbox entry")
    meter.create_observable_gauge(n.WORKERS, [each(lambda s: len(s.workers_seen))],
                                  unit="{worker}", description="relays seen in the last minute")
