"""Redis Cluster: a client whose callers wait for a connection, and slot grouping.

Owns :class:`ClusterClient` (built by :func:`~sharedos_redis.store.client.create_redis`
for a ``redis+cluster://`` URL), :func:`is_cluster` and :func:`slot_groups`.

redis-py's ``RedisCluster`` raises ``MaxConnectionsError`` as soon as a node's pool
is exhausted. :class:`ClusterClient` instead admits at most ``max_connections``
commands (a pipeline counts as one: it uses at most one connection per node) at
once and makes the others wait, at most ``pool_timeout_s``, like the blocking pool
of a single server. Every node's pool holds as many connections, so no node is ever
asked for more than it has.

Every key of a namespace carries its ``{ns}`` hash tag, so every script and every
single-stream read routes to the namespace's node; a command over several
namespaces (an ``XREAD`` of two streams) must be split by slot first
(:func:`slot_groups`). ``MOVED``/``ASK`` redirections during resharding and a new
primary after a failover are followed by redis-py; failures in between surface as
client errors that :mod:`~sharedos_redis.store.boundary` maps to ``StoreUnavailable``.
"""

from __future__ import annotations

import contextvars
import os
import traceback
from collections.abc import AsyncIterator, Iterable, Iterator
from contextlib import asynccontextmanager, contextmanager
from typing import Any, TypeVar

import anyio
from redis.asyncio import Redis
from redis.asyncio.cluster import ClusterPipeline, RedisCluster
from redis.crc import key_slot
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import MaxConnectionsError

__all__ = ["ClusterClient", "as_redis", "is_cluster", "slot_groups"]

_K = TypeVar("_K", bound=str)
_CONNECTION_MODULE = os.path.join("redis", "asyncio", "connection.py")
_admitted: contextvars.ContextVar[bool] = contextvars.ContextVar("admitted", default=False)


def is_cluster(redis: object) -> bool:
    """Whether ``redis`` is a Redis Cluster client (multi-key commands must share a slot)."""
    return isinstance(redis, RedisCluster)


def slot_groups(redis: object, keys: Iterable[_K]) -> list[list[_K]]:
    """``keys`` split into groups one command may read together.

    One group on a single server or Sentinel; one group per hash slot on a cluster.
    """
    ordered = list(dict.fromkeys(keys))
    if not is_cluster(redis):
        return [ordered] if ordered else []
    groups: dict[int, list[_K]] = {}
    for key in ordered:
        groups.setdefault(key_slot(key.encode()), []).append(key)
    return list(groups.values())


class ClusterClient(RedisCluster):
    """A ``RedisCluster`` whose callers wait (bounded) for a connection instead of failing.

    Args:
        max_connections: commands in flight at once, and each node's pool size.
        pool_timeout_s: how long a caller waits for its turn before
            ``MaxConnectionsError`` (mapped to ``StoreUnavailable``).
        kwargs: passed to ``RedisCluster`` (``startup_nodes``, TLS, credentials, ...).
    """

    def __init__(self, *, max_connections: int, pool_timeout_s: float, **kwargs: Any) -> None:
        super().__init__(max_connections=max_connections, **kwargs)
        self.pool_timeout_s = pool_timeout_s
        self._admitted = anyio.Semaphore(max_connections)

    @asynccontextmanager
    async def connection_slot(self) -> AsyncIterator[None]:
        """Wait (at most ``pool_timeout_s``) until a command may use a connection.

        A command issued inside an admitted one (a pipeline's redirected command)
        runs at once: it uses the admitted caller's share.
        """
        if _admitted.get():
            yield
            return
        try:
            with anyio.fail_after(self.pool_timeout_s):
                await self._admitted.acquire()
        except TimeoutError:
            raise MaxConnectionsError(
                f"no free cluster connection within {self.pool_timeout_s}s") from None
        token = _admitted.set(True)
        try:
            yield
        finally:
            _admitted.reset(token)
            self._admitted.release()

    async def execute_command(self, *args: Any, **kwargs: Any) -> Any:
        """Run one command once a connection is free (see :meth:`connection_slot`)."""
        deadline = anyio.current_time() + self.pool_timeout_s
        async with self.connection_slot():
            while True:
                try:
                    with _torn_down_is_a_connection_error():
                        return await super().execute_command(*args, **kwargs)
                except MaxConnectionsError:
                    # a redirection to a node whose pool is busy: wait there too
                    if anyio.current_time() >= deadline:
                        raise
                    await anyio.sleep(0.005)

    def pipeline(self, transaction: Any | None = None,
                 shard_hint: Any | None = None) -> ClusterPipeline:
        """A non-transactional pipeline that waits for a connection like a command."""
        super().pipeline(transaction, shard_hint)  # refuses transactions, as redis-py does
        return _WaitingPipeline(self)  # type: ignore[abstract]  # redis-py's stubs mark a pool


class _WaitingPipeline(ClusterPipeline):
    async def execute(self, raise_on_error: bool = True,
                      allow_redirections: bool = True) -> list[Any]:
        client = self._client
        assert isinstance(client, ClusterClient)
        if not self._command_stack:
            return []
        async with client.connection_slot():
            with _torn_down_is_a_connection_error():
                return await super().execute(raise_on_error, allow_redirections)


@contextmanager
def _torn_down_is_a_connection_error() -> Iterator[None]:
    """redis-py 5.3's cluster client disconnects every node after one connection error
    (to re-read the topology); a connection another task is opening or using at that
    moment fails inside redis-py with ``AttributeError`` (its writer is gone). That is a
    lost connection, so it becomes one: the caller gets ``StoreUnavailable`` and retries."""
    try:
        yield
    except AttributeError as exc:
        frames = traceback.extract_tb(exc.__traceback__)
        if not any(f.filename.endswith(_CONNECTION_MODULE) for f in frames):
            raise
        raise RedisConnectionError(f"connection closed under the command: {exc}") from exc


def as_redis(client: ClusterClient) -> Redis:
    """``client`` typed as the single-server client every store takes.

    The stores use only commands both clients offer (keyed commands, scripts,
    single-slot reads, non-transactional pipelines); the cluster tests run the same
    modules on both.
    """
    redis: Redis = client  # type: ignore[assignment]  # same command surface, see above
    return redis
