"""`python -m bench --quick` runs end to end against real Redis (numbers are not asserted)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow
@pytest.mark.real_redis
def test_bench_quick_runs_and_reports_every_row(tmp_path: Path) -> None:
    url = os.environ.get("REDIS_URL")
    if not url:
        pytest.skip("REDIS_URL is not set")
    bench_url = url.rsplit("/", 1)[0] + "/9"  # benchmarks keep to their own database
    out = tmp_path / "bench.json"
    done = subprocess.run(
        [sys.executable, "-m", "bench", "--quick", "--redis-url", bench_url, "--json", str(out)],
        cwd=ROOT, capture_output=True, text=True, timeout=240, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    for row in ("floor: streams request/reply", "bare arq (worker process)",
                "sharedos-redis (worker process)", "sharedos-redis (fakeredis, local)",
                "sharedos-redis, OpenTelemetry on", "fakeredis, local, OpenTelemetry on"):
        assert row in done.stdout
    assert out.exists()
