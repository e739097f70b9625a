"""Worker and requester processes of the fault suite, always stopped at teardown."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import anyio

__all__ = ["APP", "ROOT", "Procs"]

ROOT = Path(__file__).resolve().parents[2]
APP = "tests.faults.fault_app:host"
_CLI = [sys.executable, "-m", "sharedos_redis.worker.cli", "worker", "--app", APP]
_REQUESTER = [sys.executable, "-m", "tests.faults.requester"]


class Procs:
    """Starts processes against one Redis URL and namespace and remembers them."""

    def __init__(self, url: str, namespace: str) -> None:
        self.url, self.namespace = url, namespace
        self.started: list[subprocess.Popen[bytes]] = []
        self._logs = tempfile.TemporaryDirectory(prefix="sos-faults-")

    def env(self, fault: str | None = None, **extra: str) -> dict[str, str]:
        """The child environment: Redis URL, namespace, the fault (or none)."""
        env = dict(os.environ, SHAREDOS_REDIS_URL=self.url, SHAREDOS_NAMESPACE=self.namespace,
                   PYTHONPATH=str(ROOT), **extra)
        env.pop("SHAREDOS_FAULT", None)
        if fault is not None:
            env["SHAREDOS_FAULT"] = fault
        return env

    def _start(self, argv: list[str], name: str, env: dict[str, str],
               stdout: Any) -> subprocess.Popen[bytes]:
        log = open(Path(self._logs.name) / f"{name}-{len(self.started)}.log", "wb")  # noqa: SIM115
        try:
            proc = subprocess.Popen(argv, cwd=ROOT, env=env, stdout=stdout, stderr=log)
        finally:
            log.close()
        self.started.append(proc)
        return proc

    def worker(self, fault: str | None = None, **extra: str) -> subprocess.Popen[bytes]:
        """Start ``sharedos-redis worker`` on the fault suite's app."""
        return self._start(_CLI, "worker", self.env(fault, **extra), subprocess.DEVNULL)

    async def ready(self, *agents: str, timeout_s: float = 30) -> None:
        """Wait until ``agents`` hold a live route lease (a worker started for them is up)."""
        from sharedos_redis.store.client import RedisSettings, create_redis

        from ..support import wait_served

        redis = create_redis(RedisSettings.from_url(self.url))
        try:
            await wait_served(redis, self.namespace, *agents, timeout_s=timeout_s)
        finally:
            await redis.aclose()

    def requester(self, *args: str, fault: str | None = None) -> subprocess.Popen[bytes]:
        """Start ``python -m tests.faults.requester <args>`` (stdout piped)."""
        return self._start([*_REQUESTER, *args], "requester", self.env(fault), subprocess.PIPE)

    async def wait(self, proc: subprocess.Popen[bytes], timeout_s: float) -> int:
        """The exit code of ``proc`` (waited in a thread; TimeoutExpired after ``timeout_s``)."""
        return await anyio.to_thread.run_sync(lambda: proc.wait(timeout=timeout_s))

    async def outcome(self, proc: subprocess.Popen[bytes], timeout_s: float) -> dict[str, Any]:
        """The JSON line a requester printed (it must exit 0)."""
        out, _ = await anyio.to_thread.run_sync(lambda: proc.communicate(timeout=timeout_s))
        assert proc.returncode == 0, (proc.returncode, out, self.logs())
        parsed: dict[str, Any] = json.loads(out.decode().strip().splitlines()[-1])
        return parsed

    def logs(self) -> str:
        """The tail of every child's stderr (for assertion messages)."""
        parts = []
        for path in sorted(Path(self._logs.name).glob("*.log")):
            parts.append(f"--- {path.name}\n{path.read_text(errors='replace')[-1500:]}")
        return "\n".join(parts)

    def kill(self, proc: subprocess.Popen[bytes]) -> None:
        """SIGKILL ``proc`` and reap it."""
        if proc.poll() is None:
            proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=10)

    def stop_all(self) -> None:
        """SIGTERM every live child (SIGKILL after 10 s) and drop the logs."""
        for proc in self.started:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc in self.started:
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
            if proc.stdout is not None:
                proc.stdout.close()
        self._logs.cleanup()
