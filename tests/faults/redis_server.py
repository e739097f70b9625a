"""A dedicated ``redis-server`` on a free loopback port, stopped and restarted by tests."""

from __future__ import annotations

import shutil
import signal
import socket
import subprocess
import tempfile

import anyio
from redis.asyncio import Redis
from redis.exceptions import RedisError

__all__ = ["RedisServer"]


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


class RedisServer:
    """One private server; ``persistent`` turns on the AOF so a restart keeps data."""

    def __init__(self, *, persistent: bool) -> None:
        self.persistent = persistent
        self.port = _free_port()
        self.dir = tempfile.mkdtemp(prefix="sos-redis-")
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        """The server's URL (database 0)."""
        return f"redis://127.0.0.1:{self.port}/0"

    @staticmethod
    def available() -> bool:
        """Whether a ``redis-server`` binary is on PATH."""
        return shutil.which("redis-server") is not None

    async def start(self) -> None:
        """Start (or restart, same port and dir) and wait until it answers PING."""
        aof = ["--appendonly", "yes", "--appendfsync", "always"] if self.persistent else [
            "--appendonly", "no"]
        self.proc = subprocess.Popen(  # noqa: ASYNC220 - returns at once, never waits
            ["redis-server", "--port", str(self.port), "--bind", "127.0.0.1", "--save", "",
             "--dir", self.dir, *aof], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        probe = Redis.from_url(self.url, socket_connect_timeout=0.2, socket_timeout=0.5)
        try:
            with anyio.fail_after(10):
                while True:
                    try:
                        if await probe.ping():
                            return
                    except (RedisError, OSError):
                        await anyio.sleep(0.02)  # the server is still starting
        finally:
            await probe.aclose()

    def kill(self) -> None:
        """SIGKILL the server (an AOF with fsync always keeps every acknowledged write)."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(timeout=10)

    def cleanup(self) -> None:
        """Kill the server and delete its directory."""
        self.kill()
        shutil.rmtree(self.dir, ignore_errors=True)
