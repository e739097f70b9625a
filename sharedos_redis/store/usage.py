"""The Redis grant usage store: atomic ``maxUses`` counters shared by every process.

Owns ``RedisGrantUsageStore`` (the kernel's ``GrantUsageStore``). The check and
the increment run in one Lua script (``consume_grant_use``), so concurrent
consumers on any number of connections never spend more than ``max_uses``.
Counters live in ``sos:{ns}:usage`` for as long as the namespace's grants do.
"""

from __future__ import annotations

from collections.abc import Awaitable
from typing import cast

from redis.asyncio import Redis

from ..errors import ConfigurationError
from .boundary import STORE_ERRORS, store_unavailable
from .keys import Keys
from .scripts import Scripts

__all__ = ["RedisGrantUsageStore"]


class RedisGrantUsageStore:
    """Use counters of grants with ``maxUses``, one hash per namespace."""

    def __init__(self, redis: Redis) -> None:
        self._redis = redis
        self._scripts = Scripts(redis)

    async def consume(self, namespace_id: str, grant_id: str, max_uses: int) -> bool:
        """Spend one use if fewer than ``max_uses`` were spent.

        Returns:
            True when a use was spent; False when the grant is exhausted.

        Raises:
            ConfigurationError: ``max_uses`` is not a positive integer.
            StoreUnavailable: Redis failed (the kernel then fails closed).
        """
        if isinstance(max_uses, bool) or not isinstance(max_uses, int) or max_uses < 1:
            raise ConfigurationError(f"max_uses must be a positive integer, got {max_uses!r}")
        spent = await self._scripts.call(
            "consume_grant_use", [Keys(namespace_id).usage], [grant_id, max_uses]
        )
        return int(spent) == 1

    async def release(self, namespace_id: str, grant_id: str) -> None:
        """Give back one reserved use refused before admission (never below zero).

        The transport normally does this inside its own refusal script; this is the
        kernel's fallback for other refusals before admission.

        Raises:
            StoreUnavailable: Redis failed (the use then stays spent).
        """
        keys = Keys(namespace_id)
        await self._scripts.call("release_grant_use", [keys.usage, keys.audit],
                                 [grant_id, 1000, "", ""])

    async def used(self, namespace_id: str, grant_id: str) -> int:
        """How many uses of ``grant_id`` were spent (0 when never consumed).

        Raises:
            StoreUnavailable: Redis failed.
        """
        try:
            raw = await cast("Awaitable[bytes | None]",
                             self._redis.hget(Keys(namespace_id).usage, grant_id))
        except STORE_ERRORS as exc:
            raise store_unavailable("usage.used", exc) from exc
        return 0 if raw is None else int(raw)
