"""Worker subprocesses the benchmark starts, and always stops (also on errors and Ctrl-C)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path

__all__ = ["ROOT", "RESULTS", "running", "stop_all"]

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results"
_STARTED: list[subprocess.Popen[bytes]] = []


def _stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def stop_all() -> None:
    """Stop every process this run started that is still running (SIGTERM, then SIGKILL)."""
    while _STARTED:
        _stop(_STARTED.pop())


@contextmanager
def running(args: list[str], env: Mapping[str, str], log_name: str
            ) -> Iterator[subprocess.Popen[bytes]]:
    """Run ``python <args>`` from the repository root with ``env`` added; stop it on exit.

    Its output goes to ``bench/results/<log_name>.log``.
    """
    RESULTS.mkdir(parents=True, exist_ok=True)
    full_env = dict(os.environ, **env)
    full_env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT),
                                                           os.environ.get("PYTHONPATH")]))
    with open(RESULTS / f"{log_name}.log", "wb") as log:
        proc = subprocess.Popen([sys.executable, *args], cwd=ROOT, env=full_env,
                                stdout=log, stderr=subprocess.STDOUT)
    _STARTED.append(proc)
    try:
        yield proc
    finally:
        _stop(proc)
        if proc in _STARTED:
            _STARTED.remove(proc)
