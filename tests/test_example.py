"""The README's first command: the example runs to completion and tells its story."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "scheduler_example", *args], cwd=ROOT,
                          capture_output=True, text=True, timeout=120, check=False)


def _assert_story(out: str) -> None:
    assert "bob <- alice: ok" in out                      # the delegation worked
    assert "eve <- alice: denied tool_unavailable" in out  # eve holds no grant
    assert "budget_exhausted" in out                       # ping-pong stopped by the budget
    assert "alice <- carol: denied tool_unavailable" in out  # maxUses=2 spent by tick 3
    assert "pending requests: 0" in out


def test_example_on_embedded_fakeredis() -> None:
    done = _run("--ticks", "3", "--seed", "1")
    assert done.returncode == 0, done.stderr
    _assert_story(done.stdout)


@pytest.mark.real_redis
def test_example_on_real_redis() -> None:
    url = os.environ.get("REDIS_URL")
    if not url:
        pytest.skip("REDIS_URL is not set")
    namespace = f"example-{uuid.uuid4().hex[:8]}"
    done = _run("--redis-url", url, "--in-process-worker", "--namespace", namespace)
    assert done.returncode == 0, done.stderr
    _assert_story(done.stdout)
    import redis

    client = redis.Redis.from_url(url)
    try:
        for key in client.scan_iter(match=f"sos:{{{namespace}}}:*", count=500):
            client.delete(key)
    finally:
        client.close()
