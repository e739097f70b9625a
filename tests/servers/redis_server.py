"""A private ``redis-server`` on a free loopback port: plain, with AOF, or TLS-only.

The port is chosen once, so :meth:`RedisServer.restart` (and ``stop`` then ``start``)
brings the server back on the SAME port: the shape of a real outage. Extra config
lines go into the server's config file; a restart reuses that file (including any
``CONFIG REWRITE`` or Sentinel reconfiguration since).
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal

import anyio
from redis.asyncio import Redis
from redis.exceptions import AuthenticationError, RedisError, ResponseError

from ._process import ServerProcess, ServerStartError, free_port, redis_server_available
from .tls import CertPair, TlsMaterial

__all__ = ["RedisServer"]

HOST = "127.0.0.1"
START_TIMEOUT_S = 10.0
_PORT_ATTEMPTS = 3


class RedisServer:
    """One ``redis-server`` that this test started (data node, or sentinel with ``sentinel``).

    ``persistent`` turns on an fsync-always AOF so a restart (even after SIGKILL)
    keeps every acknowledged write. ``tls`` makes it TLS-only (``port 0``,
    ``tls-port``) with ``tls_cert`` (default ``tls.server``), trusting ``tls.ca``
    for client certificates (``tls_auth_clients``).
    """

    def __init__(self, *, persistent: bool = False, config: Sequence[str] = (),
                 tls: TlsMaterial | None = None, tls_cert: CertPair | None = None,
                 tls_auth_clients: Literal["no", "optional", "yes"] = "optional",
                 sentinel: bool = False, name: str = "redis") -> None:
        self.persistent, self.sentinel, self.name = persistent, sentinel, name
        self.extra_config = list(config)
        self.tls = tls
        self.tls_cert = tls_cert or (tls.server if tls is not None else None)
        self.tls_auth_clients = tls_auth_clients
        self.port = free_port()
        self.dir = Path(tempfile.mkdtemp(prefix=f"sos-{name}-"))
        self.process = ServerProcess(self.dir, name, sentinel=sentinel)
        self._started_once = False

    @staticmethod
    def available() -> bool:
        """Whether a ``redis-server`` binary is on PATH (fixtures skip without it)."""
        return redis_server_available()

    @property
    def host(self) -> str:
        """The loopback address the server binds."""
        return HOST

    @property
    def address(self) -> tuple[str, int]:
        """``(host, port)``."""
        return HOST, self.port

    @property
    def url(self) -> str:
        """``redis://127.0.0.1:P/0``, or ``rediss://...`` for a TLS server."""
        return f"{'rediss' if self.tls else 'redis'}://{HOST}:{self.port}/0"

    @property
    def pid(self) -> int | None:
        """The server's PID while it runs."""
        return self.process.pid

    @property
    def running(self) -> bool:
        """Whether the server process is alive."""
        return self.process.running

    def tls_kwargs(self, *, client_cert: bool = False,
                   check_hostname: bool = True) -> dict[str, Any]:
        """redis-py TLS keyword arguments trusting the private CA, for ``Redis.from_url(url,
        **kwargs)`` (``{}`` without TLS; ``Redis(host, port)`` also needs ``ssl=True``)."""
        if self.tls is None:
            return {}
        kwargs: dict[str, Any] = {"ssl_ca_certs": str(self.tls.ca),
                                  "ssl_cert_reqs": "required",
                                  "ssl_check_hostname": check_hostname}
        if client_cert:
            kwargs |= {"ssl_certfile": str(self.tls.client.cert),
                       "ssl_keyfile": str(self.tls.client.key)}
        return kwargs

    def client(self, **kwargs: Any) -> Redis:
        """An asyncio client on this server (TLS: trusting the CA, hostname checked)."""
        options: dict[str, Any] = {"socket_connect_timeout": 1.0, "socket_timeout": 2.0}
        if self.tls is not None:
            options |= {"ssl": True, **self.tls_kwargs()}
        return Redis(host=HOST, port=self.port, **(options | kwargs))

    async def start(self, timeout_s: float = START_TIMEOUT_S) -> None:
        """Start (or start again, same port and directory) and wait until it answers PING."""
        if not self._started_once:
            await self._first_start(timeout_s)
            return
        self.process.spawn(None)
        await self.process.wait_ready(self._ping, timeout_s)

    async def _first_start(self, timeout_s: float) -> None:
        for attempt in range(_PORT_ATTEMPTS):
            self.process.spawn(self._config_lines())
            try:
                await self.process.wait_ready(self._ping, timeout_s)
            except ServerStartError:
                lost_race = "Address already in use" in self.process.log_tail()
                self.process.kill()
                if not lost_race or attempt == _PORT_ATTEMPTS - 1:
                    raise
                self.port = free_port()  # another process took the port first
                continue
            self._started_once = True
            return

    async def stop(self, timeout_s: float = 5.0) -> None:
        """Shut down cleanly (SIGTERM; SIGKILL after ``timeout_s``)."""
        await self.process.stop(timeout_s)

    def kill(self) -> None:
        """SIGKILL and reap: a crash (with the AOF, every acknowledged write survives)."""
        self.process.kill()

    async def restart(self, down_s: float = 0.0, *, crash: bool = False) -> None:
        """Stop (``crash``: SIGKILL), stay down ``down_s`` seconds, start on the same port."""
        if crash:
            self.kill()
        else:
            await self.stop()
        await anyio.sleep(down_s)  # the outage itself, not a synchronisation
        await self.start()

    def freeze(self) -> None:
        """SIGSTOP: connections stay open, nothing answers (until :meth:`thaw`)."""
        self.process.freeze()

    def thaw(self) -> None:
        """SIGCONT after :meth:`freeze`."""
        self.process.thaw()

    def cleanup(self) -> None:
        """Kill the server (if running) and delete its directory; safe to call twice."""
        self.process.kill()
        shutil.rmtree(self.dir, ignore_errors=True)

    def _config_lines(self) -> list[str]:
        lines = [f"bind {HOST}", f"dir {self.dir}"]
        if self.tls is not None and self.tls_cert is not None:
            lines += ["port 0", f"tls-port {self.port}", f"tls-cert-file {self.tls_cert.cert}",
                      f"tls-key-file {self.tls_cert.key}", f"tls-ca-cert-file {self.tls.ca}",
                      f"tls-auth-clients {self.tls_auth_clients}"]
        else:
            lines.append(f"port {self.port}")
        if not self.sentinel:
            lines += ['save ""', f"appendonly {'yes' if self.persistent else 'no'}",
                      "appendfsync always", "repl-diskless-sync-delay 0"]
        return lines + self.extra_config

    async def _ping(self) -> bool:
        tls: dict[str, Any] = {}
        if self.tls is not None:  # any certificate, but present ours in case it is required
            tls = {"ssl": True, "ssl_cert_reqs": "none", "ssl_certfile": str(self.tls.client.cert),
                   "ssl_keyfile": str(self.tls.client.key)}
        probe = Redis(host=HOST, port=self.port, socket_connect_timeout=0.2, socket_timeout=0.5,
                      **tls)
        try:
            return bool(await probe.ping())
        except (AuthenticationError, ResponseError):
            return True  # it answers (e.g. NOAUTH: the config sets a password)
        except (RedisError, OSError):
            return False  # still starting (or loading its AOF)
        finally:
            await probe.aclose()
