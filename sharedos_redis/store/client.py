"""The one Redis client factory: settings in, a bounded async client out.

Owns ``RedisSettings`` and ``create_redis``. Every connection comes from a
``BlockingConnectionPool`` (a caller waits for a free connection, at most
``pool_timeout_s``, instead of opening an unbounded number), and every socket
operation is bounded by ``socket_timeout_s`` so no call can hang forever.
Imports no fakeredis: tests build their own clients.
"""

from __future__ import annotations

from typing import Any, Self

from pydantic import BaseModel, ConfigDict, Field
from redis.asyncio import BlockingConnectionPool, Redis

__all__ = ["RedisSettings", "create_redis"]


class RedisSettings(BaseModel):
    """How to reach Redis.

    ``socket_timeout_s`` must exceed any ``BLOCK`` a caller uses (the relay blocks
    ``block_ms``, 1 s by default), or the blocked read times out as an error.
    ``max_connections`` bounds the process: a connection is held only for one
    command (waiters hold none; the reply listener and the relay each keep one
    while blocked), so a handful serves thousands of concurrent requests.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    url: str = "redis://127.0.0.1:6379/0"
    max_connections: int = Field(default=8, gt=0)
    socket_timeout_s: float = Field(default=10.0, gt=0)
    socket_connect_timeout_s: float = Field(default=5.0, gt=0)
    pool_timeout_s: float = Field(default=10.0, gt=0)
    health_check_interval_s: int = Field(default=30, ge=0)

    @classmethod
    def from_url(cls, url: str, **overrides: Any) -> Self:
        """Settings for ``url`` (``redis://``, ``rediss://`` or ``unix://``) plus overrides."""
        return cls(url=url, **overrides)


def create_redis(settings: RedisSettings) -> Redis:
    """A client on a bounded, blocking connection pool.

    The client owns its pool: ``await client.aclose()`` closes both. Responses
    are bytes (``decode_responses=False``, like arq's pool).
    """
    pool = BlockingConnectionPool.from_url(
        settings.url,
        max_connections=settings.max_connections,
        timeout=settings.pool_timeout_s,
        socket_timeout=settings.socket_timeout_s,
        socket_connect_timeout=settings.socket_connect_timeout_s,
        health_check_interval=settings.health_check_interval_s,
        decode_responses=False,
    )
    return Redis.from_pool(pool)
