"""One ``redis-server`` process (data node or sentinel) that a test started and stops by PID.

Every process started here is remembered until it has exited; an ``atexit`` hook
SIGKILLs any still running when the test process ends (interrupt, failed teardown)
and deletes its directory, so nothing outlives the test run. Nothing here ever
signals a process it did not start.
"""

from __future__ import annotations

import atexit
import shutil
import signal
import socket
import subprocess
from collections.abc import Awaitable, Callable
from pathlib import Path

import anyio
import pytest

__all__ = ["ServerProcess", "ServerStartError", "free_port", "poll_until",
           "redis_server_available", "require_redis_server"]

POLL_S = 0.01
_LIVE: dict[int, tuple[subprocess.Popen[bytes], Path]] = {}


@atexit.register
def _kill_leftovers() -> None:
    for proc, directory in list(_LIVE.values()):
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=5)
        shutil.rmtree(directory, ignore_errors=True)
    _LIVE.clear()


async def poll_until(check: Callable[[], Awaitable[bool]], *, interval_s: float = POLL_S) -> None:
    """Await ``check()`` every ``interval_s`` until it is true (wrap in ``anyio.fail_after``)."""
    while True:
        if await check():
            return
        await anyio.sleep(interval_s)


class ServerStartError(RuntimeError):
    """A server did not answer before its deadline, or exited while starting."""


def redis_server_available() -> bool:
    """Whether a ``redis-server`` binary is on PATH."""
    return shutil.which("redis-server") is not None


def require_redis_server() -> None:
    """Skip the calling test when no ``redis-server`` binary is on PATH."""
    if not redis_server_available():
        pytest.skip("no redis-server binary on PATH")


def free_port() -> int:
    """A loopback TCP port that was free a moment ago."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


class ServerProcess:
    """``redis-server <dir>/<name>.conf [--sentinel]``, with its log in the same directory."""

    def __init__(self, directory: Path, name: str, *, sentinel: bool) -> None:
        self.conf = directory / f"{name}.conf"
        self.log = directory / f"{name}.log"
        self.sentinel = sentinel
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def pid(self) -> int | None:
        """The PID while the process runs, else ``None``."""
        return self.proc.pid if self.proc is not None and self.proc.poll() is None else None

    @property
    def running(self) -> bool:
        """Whether the process was started and has not exited."""
        return self.proc is not None and self.proc.poll() is None

    def spawn(self, config: list[str] | None) -> None:
        """Start the process; ``config`` (re)writes the config file, ``None`` reuses it."""
        if self.running:
            raise RuntimeError(f"{self.conf.stem} is already running")
        if config is not None:
            self.conf.write_text("\n".join([*config, f"logfile {self.log}", ""]))
        argv = ["redis-server", str(self.conf), *(["--sentinel"] if self.sentinel else [])]
        self.proc = subprocess.Popen(
            argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        _LIVE[self.proc.pid] = (self.proc, self.conf.parent)

    async def wait_ready(self, probe: Callable[[], Awaitable[bool]], timeout_s: float) -> None:
        """Poll ``probe`` until it returns true; fail if the process exits or time runs out."""
        try:
            with anyio.fail_after(timeout_s):
                await poll_until(lambda: self._ready(probe))
        except TimeoutError as exc:
            raise ServerStartError(f"{self.conf.stem} not ready after {timeout_s} s:\n"
                                   f"{self.log_tail()}") from exc

    async def _ready(self, probe: Callable[[], Awaitable[bool]]) -> bool:
        if not self.running:
            raise ServerStartError(f"{self.conf.stem} exited:\n{self.log_tail()}")
        return await probe()

    async def stop(self, timeout_s: float = 5.0) -> None:
        """SIGTERM and wait (a clean shutdown); SIGKILL if it outlives ``timeout_s``."""
        if self.running:
            self._signal(signal.SIGTERM)
            self._signal(signal.SIGCONT)  # a frozen server must run to handle SIGTERM
            if not await self._exited_within(timeout_s):
                self.kill()
        self._forget()

    def kill(self) -> None:
        """SIGKILL and reap (a crash: no shutdown, no final fsync); takes milliseconds."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=10)
        self._forget()

    def freeze(self) -> None:
        """SIGSTOP: the server keeps its sockets open but answers nothing."""
        self._signal(signal.SIGSTOP)

    def thaw(self) -> None:
        """SIGCONT after :meth:`freeze`."""
        self._signal(signal.SIGCONT)

    def log_tail(self, lines: int = 20) -> str:
        """The last lines of the server's log file (empty if it has none yet)."""
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""

    def _signal(self, sig: signal.Signals) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(sig)  # Popen signals its own PID only

    async def _exited_within(self, timeout_s: float) -> bool:
        async def exited() -> bool:
            return not self.running

        with anyio.move_on_after(timeout_s):
            await poll_until(exited)
            return True
        return False

    def _forget(self) -> None:
        if self.proc is not None and self.proc.poll() is not None:
            _LIVE.pop(self.proc.pid, None)
