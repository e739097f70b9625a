"""Per-trace hop budgets: the loop guard of a whole delegation tree.

Owns ``TraceBudget``, the host/human API over ``sos:{ns}:budget:<trace>``
(string int, hops left). The trace id is trusted and unchanged across a
delegation tree, including hand-offs that start new conversations, so an
A→B→A→... chain drains one budget. Hops are *spent* only inside the transport's
accept script (atomic across processes); this module sets, starts and reads
them. Setting is the only way to replenish.
"""

from __future__ import annotations

from redis.asyncio import Redis

from ..errors import ConfigurationError
from .boundary import STORE_ERRORS, store_unavailable
from .keys import Keys
from .limits import BUDGET_TTL_S, DEFAULT_HOPS

__all__ = ["TraceBudget"]


def _check_hops(hops: int) -> int:
    if isinstance(hops, bool) or not isinstance(hops, int) or hops < 0:
        raise ConfigurationError(f"hops must be a non-negative integer, got {hops!r}")
    return hops


class TraceBudget:
    """Reads and replenishes trace budgets.

    Args:
        redis: the client.
        default_hops: what :meth:`start` sets when no count is given; the
            transport initialises a missing budget with its own
            ``default_budget_hops`` on the first accept.
        ttl_s: the budget's time to live (refreshed on every spend).
    """

    def __init__(self, redis: Redis, *, default_hops: int = DEFAULT_HOPS,
                 ttl_s: int = BUDGET_TTL_S) -> None:
        self._redis = redis
        self.default_hops = _check_hops(default_hops)
        self.ttl_ms = ttl_s * 1000

    async def set(self, namespace_id: str, trace_id: str, hops: int) -> None:
        """Set the hops left for a trace (replenish or cut).

        Raises:
            ConfigurationError: ``hops`` is not a non-negative integer.
            StoreUnavailable: Redis failed.
        """
        await self._set(namespace_id, trace_id, _check_hops(hops), only_new=False)

    async def start(self, namespace_id: str, trace_id: str, hops: int | None = None) -> bool:
        """Initialise a trace's budget at its root turn unless it already has one.

        Returns:
            True when the budget was created; False when the trace already had one.

        Raises:
            ConfigurationError: ``hops`` is not a non-negative integer.
            StoreUnavailable: Redis failed.
        """
        count = self.default_hops if hops is None else _check_hops(hops)
        return await self._set(namespace_id, trace_id, count, only_new=True)

    async def get(self, namespace_id: str, trace_id: str) -> int | None:
        """Hops left for a trace, or None when it has no budget yet.

        Raises:
            StoreUnavailable: Redis failed.
        """
        try:
            raw = await self._redis.get(Keys(namespace_id).budget(trace_id))
        except STORE_ERRORS as exc:
            raise store_unavailable("budget.get", exc) from exc
        return None if raw is None else int(raw)

    async def _set(self, namespace_id: str, trace_id: str, hops: int, *, only_new: bool) -> bool:
        try:
            done = await self._redis.set(Keys(namespace_id).budget(trace_id), hops,
                                         px=self.ttl_ms, nx=only_new)
        except STORE_ERRORS as exc:
            raise store_unavailable("budget.set", exc) from exc
        return bool(done)
