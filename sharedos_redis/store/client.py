"""The one connection description and client factory: settings in, bounded clients out.

Owns :class:`RedisSettings`, :func:`create_pool` and :func:`create_redis`. The
host's client, the worker's arq pool, the CLI and every extra connection are built
from the same settings by the same function, so TLS, credentials, database and
Sentinel can never differ between the app and its workers.

Every pool is blocking (a caller waits for a free connection, at most
``pool_timeout_s``, instead of opening an unbounded number) and every socket
operation is bounded by ``socket_timeout_s``. URL forms:

- ``redis://[user:password@]host:port/db``, ``unix:///path?db=0``
- ``rediss://...`` — TLS; hostname verification is on unless ``ssl_check_hostname``
  is False; ``ssl_ca_certs`` names a private CA, ``ssl_certfile``/``ssl_keyfile`` a
  client certificate.
- ``redis+sentinel://[user:password@]host:port[,host:port...]/<master>[/<db>]`` —
  the primary named ``<master>`` as the sentinels report it (``rediss+sentinel://``
  for TLS); authority and every other read go to the primary.
- ``redis+cluster://[user:password@]host:port[,host:port...]`` — a Redis Cluster
  (``rediss+cluster://`` for TLS), reached through any of the listed nodes; database 0
  only. :func:`create_redis` returns a :class:`~sharedos_redis.store.cluster.ClusterClient`
  (see there); every read goes to the primary owning the key's slot. Workers run
  without arq on a cluster (:mod:`~sharedos_redis.worker.streams`).

Imports no fakeredis: tests build their own clients.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Self
from urllib.parse import parse_qsl, unquote, urlencode, urlsplit

from pydantic import BaseModel, ConfigDict, Field, SecretStr, ValidationError
from redis.asyncio import Connection, ConnectionPool, Redis
from redis.asyncio.connection import parse_url
from redis.asyncio.sentinel import (
    Sentinel,
    SentinelConnectionPool,
    SentinelManagedConnection,
    SentinelManagedSSLConnection,
)

from ..errors import ConfigurationError
from .cluster import ClusterClient, as_redis
from .connection import QuickCheckoutPool, quick_connection_class

__all__ = ["ENV_PREFIX", "RedisSettings", "create_pool", "create_redis"]

ENV_PREFIX = "SHAREDOS_REDIS_"
"""Environment variables read by :meth:`RedisSettings.from_env`: ``SHAREDOS_REDIS_URL``,
``SHAREDOS_REDIS_PASSWORD``, ``SHAREDOS_REDIS_SSL_CA_CERTS``, ... (prefix + field name)."""

_SENTINEL_SCHEMES = {"redis+sentinel": False, "rediss+sentinel": True}
_CLUSTER_SCHEMES = {"redis+cluster": False, "rediss+cluster": True}
_TLS_SCHEMES = {"rediss", "rediss+sentinel", "rediss+cluster"}


class RedisSettings(BaseModel):
    """How to reach Redis: one description for the host, the workers and the CLI.

    Attributes:
        url: see the module doc for the accepted forms.
        username: ACL user (overrides the URL's).
        password: password (overrides the URL's); never shown in ``repr``.
        db: database number (overrides the URL's).
        ssl_ca_certs: CA bundle that signs the server certificate (``rediss`` only).
        ssl_certfile: client certificate, for servers that require one.
        ssl_keyfile: the client certificate's key.
        ssl_check_hostname: verify the server certificate names the host (on by default).
        sentinel_password: password of the sentinels themselves, if they require one.
        max_connections: connections per pool. One is held only for one command (waiters
            hold none; the reply listener and the relay keep one each while blocked).
            16 by default: with 8, 50 concurrent requesters queued for a connection on
            both sides and each request/reply cost 15 % more CPU (bench, README).
        socket_timeout_s: bound of one socket operation; must exceed any ``BLOCK`` a
            caller uses (the relay blocks ``block_ms``, 1 s by default).
        socket_connect_timeout_s: bound of connecting.
        pool_timeout_s: how long a caller waits for a free connection.
        health_check_interval_s: idle connections are PINGed before reuse after this long.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    url: str = Field(default="redis://127.0.0.1:6379/0", repr=False)  # may hold a password
    username: str | None = None
    password: SecretStr | None = None
    db: int | None = Field(default=None, ge=0)
    ssl_ca_certs: str | None = None
    ssl_certfile: str | None = None
    ssl_keyfile: str | None = None
    ssl_check_hostname: bool = True
    sentinel_password: SecretStr | None = None
    max_connections: int = Field(default=16, gt=0)
    socket_timeout_s: float = Field(default=10.0, gt=0)
    socket_connect_timeout_s: float = Field(default=5.0, gt=0)
    pool_timeout_s: float = Field(default=10.0, gt=0)
    health_check_interval_s: int = Field(default=30, ge=0)

    @classmethod
    def from_url(cls, url: str, **overrides: Any) -> Self:
        """Settings for ``url`` plus field overrides.

        Raises:
            ConfigurationError: the URL or an override is invalid.
        """
        return cls.checked(url=url, **overrides)

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None, **overrides: Any) -> Self:
        """Settings from ``SHAREDOS_REDIS_<FIELD>`` variables (``SHAREDOS_REDIS_URL``, ...).

        Args:
            environ: where to read (default ``os.environ``).
            overrides: fields that win over the environment.

        Raises:
            ConfigurationError: a variable holds an invalid value.
        """
        import os

        env = os.environ if environ is None else environ
        values: dict[str, Any] = {
            name: env[ENV_PREFIX + name.upper()]
            for name in cls.model_fields if ENV_PREFIX + name.upper() in env}
        return cls.checked(**{**values, **overrides})

    @classmethod
    def checked(cls, **values: Any) -> Self:
        """Build and validate settings, raising :class:`ConfigurationError` when invalid."""
        try:
            settings = cls.model_validate(values)
        except ValidationError as exc:
            first = exc.errors()[0]
            where = ".".join(str(p) for p in first["loc"]) or "settings"
            raise ConfigurationError(f"invalid Redis setting {where}: {first['msg']}") from None
        settings.scheme()  # validates the URL form
        return settings

    def scheme(self) -> str:
        """The URL scheme, checked against the TLS options.

        Raises:
            ConfigurationError: unknown scheme, or TLS files given for a plain URL.
        """
        scheme = urlsplit(self.url).scheme
        if scheme not in {"redis", "rediss", "unix", *_SENTINEL_SCHEMES, *_CLUSTER_SCHEMES}:
            raise ConfigurationError(f"unsupported Redis URL scheme {scheme!r}")
        tls_files = self.ssl_ca_certs or self.ssl_certfile or self.ssl_keyfile
        if tls_files and scheme not in _TLS_SCHEMES:
            raise ConfigurationError("TLS files are set but the URL is not rediss:// "
                                     "(or rediss+sentinel://, rediss+cluster://)")
        if scheme in _CLUSTER_SCHEMES and self.db:
            raise ConfigurationError("a Redis Cluster has database 0 only")
        return scheme

    @property
    def tls(self) -> bool:
        """Whether connections use TLS."""
        return self.scheme() in _TLS_SCHEMES

    @property
    def cluster(self) -> bool:
        """Whether the URL names a Redis Cluster (workers then run without arq)."""
        return self.scheme() in _CLUSTER_SCHEMES

    def redacted_url(self) -> str:
        """The URL with any password replaced by ``***`` (for logs and errors)."""
        parts = urlsplit(self.url)
        if parts.password is not None:
            parts = parts._replace(netloc=parts.netloc.replace(f":{parts.password}@", ":***@", 1))
        query = [(k, "***" if k.lower() == "password" else v)
                 for k, v in parse_qsl(parts.query, keep_blank_values=True)]
        return parts._replace(query=urlencode(query, safe="*")).geturl()

    def _connection_kwargs(self) -> dict[str, Any]:
        kwargs: dict[str, Any] = {
            "socket_timeout": self.socket_timeout_s,
            "socket_connect_timeout": self.socket_connect_timeout_s,
            "health_check_interval": self.health_check_interval_s,
            "decode_responses": False,
        }
        if self.username is not None:
            kwargs["username"] = self.username
        if self.password is not None:
            kwargs["password"] = self.password.get_secret_value()
        if self.db is not None:
            kwargs["db"] = self.db
        if self.tls:
            kwargs.update(ssl_ca_certs=self.ssl_ca_certs, ssl_certfile=self.ssl_certfile,
                          ssl_keyfile=self.ssl_keyfile, ssl_check_hostname=self.ssl_check_hostname,
                          ssl_cert_reqs="required")
        return kwargs


class _BlockingSentinelPool(SentinelConnectionPool, QuickCheckoutPool):
    """A Sentinel-managed pool whose callers wait for a free connection, like the others."""


def _sentinel_pool(settings: RedisSettings) -> ConnectionPool:
    parts = urlsplit(settings.url)
    hosts = _addresses(parts.netloc, "sentinel")
    path = [unquote(p) for p in parts.path.split("/") if p]
    if not path or len(path) > 2 or (len(path) == 2 and not path[1].isdigit()):
        raise ConfigurationError("a sentinel URL names the primary: "
                                 "redis+sentinel://host:port[,host:port]/<master>[/<db>]")
    kwargs = settings._connection_kwargs()
    _credentials(settings, kwargs)
    kwargs.setdefault("db", int(path[1]) if len(path) == 2 else 0)
    tls = settings.tls
    sentinel_kwargs: dict[str, Any] = {
        "socket_timeout": settings.socket_timeout_s,
        "socket_connect_timeout": settings.socket_connect_timeout_s}
    if settings.sentinel_password is not None:
        sentinel_kwargs["password"] = settings.sentinel_password.get_secret_value()
    if tls:
        sentinel_kwargs.update({k: v for k, v in kwargs.items() if k.startswith("ssl_")},
                               ssl=True)
    manager = Sentinel(hosts, sentinel_kwargs=sentinel_kwargs)  # type: ignore[no-untyped-call]  # redis-py leaves it unannotated
    return _BlockingSentinelPool(  # type: ignore[no-untyped-call]  # redis-py leaves it unannotated
        path[0], manager, is_master=True, max_connections=settings.max_connections,
        timeout=settings.pool_timeout_s, connection_class=quick_connection_class(
            SentinelManagedSSLConnection if tls else SentinelManagedConnection), **kwargs)


def _addresses(netloc: str, what: str) -> list[tuple[str, int]]:
    hosts = []
    for item in netloc.rpartition("@")[2].split(","):
        host, _, port = item.rpartition(":")
        if not host or not port.isdigit():
            raise ConfigurationError(f"invalid {what} address {item!r} in the Redis URL")
        hosts.append((host.strip("[]"), int(port)))
    return hosts


def _credentials(settings: RedisSettings, kwargs: dict[str, Any]) -> None:
    parts = urlsplit(settings.url)
    if parts.username and "username" not in kwargs:
        kwargs["username"] = unquote(parts.username)
    if parts.password and "password" not in kwargs:
        kwargs["password"] = unquote(parts.password)


def _cluster_client(settings: RedisSettings) -> ClusterClient:
    from redis.asyncio.cluster import ClusterNode

    parts = urlsplit(settings.url)
    if parts.path.strip("/") not in {"", "0"}:
        raise ConfigurationError("a Redis Cluster has database 0 only: "
                                 "redis+cluster://host:port[,host:port...]")
    kwargs = settings._connection_kwargs()
    kwargs.pop("db", None)
    _credentials(settings, kwargs)
    if settings.tls:
        kwargs["ssl"] = True
    nodes = [ClusterNode(host, port) for host, port in _addresses(parts.netloc, "cluster node")]
    return ClusterClient(  # type: ignore[abstract]  # redis-py's stubs mark a pool
        startup_nodes=nodes, max_connections=settings.max_connections,
        pool_timeout_s=settings.pool_timeout_s, **kwargs)


def create_pool(settings: RedisSettings) -> ConnectionPool:
    """A bounded, blocking connection pool for ``settings`` (plain, TLS or Sentinel).

    Raises:
        ConfigurationError: the URL or the TLS options are invalid, or name a cluster
            (a cluster has a pool per node: use :func:`create_redis`).
    """
    if settings.cluster:
        raise ConfigurationError("a Redis Cluster has one pool per node: use create_redis")
    if settings.scheme() in _SENTINEL_SCHEMES:
        return _sentinel_pool(settings)
    try:
        options: dict[str, Any] = dict(parse_url(settings.url))
    except ValueError as exc:
        raise ConfigurationError(f"invalid Redis URL {settings.redacted_url()}: {exc}") from None
    # the settings' own fields (username, password, db, ...) win over the URL's, as
    # documented; redis-py's from_url would let the URL win
    options.update(settings._connection_kwargs())
    options.update(max_connections=settings.max_connections, timeout=settings.pool_timeout_s,
                   connection_class=quick_connection_class(
                       options.get("connection_class", Connection)))
    return QuickCheckoutPool(**options)


def create_redis(settings: RedisSettings) -> Redis:
    """A client on a pool from :func:`create_pool`, or a cluster client.

    The client owns its pool: ``await client.aclose()`` closes both. Responses
    are bytes (``decode_responses=False``, like arq's pool). For a cluster URL it is
    a :class:`~sharedos_redis.store.cluster.ClusterClient`, typed as ``Redis`` (the
    stores use only commands both offer).

    Raises:
        ConfigurationError: the URL or the TLS options are invalid.
    """
    if settings.cluster:
        return as_redis(_cluster_client(settings))
    return Redis.from_pool(create_pool(settings))

