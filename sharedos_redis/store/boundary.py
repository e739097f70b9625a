"""The one boundary between Redis client errors and this package's typed errors.

Every redis-py exception class (``RedisError`` and its subclasses, the cluster
client's ``RedisClusterException`` family, which is not a ``RedisError``), socket and
TLS errors (``OSError``, which includes ``ssl.SSLError`` and the builtin
``TimeoutError``) become :class:`~sharedos_redis.errors.StoreUnavailable` here and
nowhere else, the way httpx maps httpcore's errors in one table. A test walks
``redis.exceptions`` so a new class cannot slip past.

Long-running loops (relay, reconciler, listener, lease renewal, audit writer, the
worker's poll) never die from a store error: they log, wait :class:`Backoff` and
resume. Imports no fakeredis and no arq.
"""

from __future__ import annotations

import logging
import random
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Final

import anyio
from redis.exceptions import ChildDeadlockedError, RedisClusterException, RedisError

from ..errors import StoreUnavailable

__all__ = ["STORE_ERRORS", "Backoff", "store_errors", "store_unavailable"]

STORE_ERRORS: Final[tuple[type[BaseException], ...]] = (
    RedisError, RedisClusterException, ChildDeadlockedError, OSError,
)
"""Every lower-level exception class a Redis call may raise (OSError covers TLS and timeouts)."""


def store_unavailable(operation: str, exc: BaseException) -> StoreUnavailable:
    """The typed error for a lower-level failure of ``operation`` (chain it with ``from``)."""
    text = str(exc).splitlines()[0][:200] if str(exc) else ""
    return StoreUnavailable(operation, f"{type(exc).__name__}: {text}" if text
                            else type(exc).__name__)


@contextmanager
def store_errors(operation: str) -> Iterator[None]:
    """Translate any :data:`STORE_ERRORS` raised inside into :class:`StoreUnavailable`.

    Raises:
        StoreUnavailable: Redis failed, timed out, refused the command or was unreachable.
    """
    try:
        yield
    except STORE_ERRORS as exc:
        raise store_unavailable(operation, exc) from exc


class Backoff:
    """Exponential back-off with full jitter for loops that must outlive an outage.

    ``await backoff.wait()`` after a failure sleeps a random time up to the current
    ceiling (``first_s`` doubling to ``max_s``); :meth:`reset` after a success. The
    first failure of an outage is logged at WARNING, repeats at DEBUG, and the
    recovery at INFO, so a 10 s outage is three log lines, not three hundred.

    Args:
        name: what the loop is, for the log lines.
        log: where to log.
        first_s: the first ceiling.
        max_s: the largest ceiling.
    """

    def __init__(self, name: str, log: logging.Logger, *, first_s: float = 0.05,
                 max_s: float = 2.0) -> None:
        self.name, self._log = name, log
        self._first_s, self._max_s = first_s, max_s
        self._ceiling_s = first_s
        self.failures = 0

    async def wait(self, exc: BaseException, *, stop: anyio.Event | None = None) -> None:
        """Log ``exc`` (once per outage at WARNING) and sleep before the next try
        (returning early once ``stop`` is set)."""
        self.failures += 1
        level = logging.WARNING if self.failures == 1 else logging.DEBUG
        self._log.log(level, "%s: store unavailable, retrying: %s", self.name, exc)
        with anyio.move_on_after(random.uniform(0, self._ceiling_s)):  # jitter, not crypto
            await (stop.wait() if stop is not None else anyio.sleep_forever())
        self._ceiling_s = min(self._max_s, self._ceiling_s * 2)

    def reset(self) -> None:
        """A success: the next failure starts a new outage."""
        if self.failures:
            self._log.info("%s: store reachable again after %d failed tries",
                           self.name, self.failures)
        self.failures = 0
        self._ceiling_s = self._first_s
