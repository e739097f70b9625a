"""Fixtures of the fault suite (a real Redis, processes) and the outcome table."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Iterator

import pytest
from redis.asyncio import Redis

from sharedos_redis.store.client import RedisSettings, create_redis
from tests.worker.helpers import drop_namespace

from .outcomes import ROWS, table
from .procs import Procs


@pytest.fixture
def fault_ns() -> str:
    """A namespace no other test or process uses."""
    return f"f-{uuid.uuid4().hex[:10]}"


@pytest.fixture
async def client(url: str, fault_ns: str) -> AsyncIterator[Redis]:
    """A client on REDIS_URL; every key of ``fault_ns`` is deleted afterwards."""
    redis = create_redis(RedisSettings.from_url(url))  # a cluster client on a cluster URL
    yield redis
    await drop_namespace(redis, fault_ns)
    await redis.aclose()


@pytest.fixture
def procs(url: str, fault_ns: str) -> Iterator[Procs]:
    """Starts worker and requester processes; every one is stopped at teardown."""
    started = Procs(url, fault_ns)
    try:
        yield started
    finally:
        started.stop_all()


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """Print the fault-by-outcome table when fault tests ran."""
    if not ROWS:
        return
    terminalreporter.section("fault x outcome")
    for line in table(sorted(ROWS, key=lambda r: r.fault)):
        terminalreporter.write_line(line)
