"""The agent directory: which agents some live worker serves (a route lease, ADR 0025).

``sos:{ns}:agents`` maps each served agent (its id encoded with :func:`encode_id`, as in
the marker's ``to`` tag) to the expiry of its route lease (ms, the server's clock).
Every worker process refreshes the leases of the agents it serves every third of
``route_lease_s`` (:class:`~sharedos_redis.worker.services.RouteLease`); several
workers may serve one agent and the latest expiry stands. The accept script reads it
(``route`` argument, after authorization, before any hop is spent): a request to an
agent with no live lease is refused ``route_unavailable``, one to a non-agent address
``route_not_agent``. The reconciler fails open requests to agents whose lease expired
early (``route_unavailable``) instead of at their deadline.

The directory is host routing state, never authority: it grants nothing, and a model
only ever sees a route code for a recipient its grants already let it ask.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from redis.asyncio import Redis

from .boundary import store_errors
from .keys import Keys, encode_id
from .scripts import Scripts

__all__ = ["AgentDirectory", "DeadRoutes", "UnroutedPage"]

_WAITING = frozenset({"accepted", "dispatched"})
"""Open states in which a request waits for a worker to take it (none is running it)."""


@dataclass(frozen=True)
class DeadRoutes:
    """The agents whose route lease expired, read at ``now_ms`` (the server clock).

    Attributes:
        now_ms: the server time of the read.
        agents: encoded ids of the agents no live worker serves.
    """

    now_ms: int
    agents: frozenset[str]


def _text(value: object) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _unattended(state: object, lease: object, now_ms: int) -> bool:
    """No worker runs the request: it waits for one, or its running turn's lease expired."""
    if state is None:
        return False
    if _text(state) in _WAITING:
        return True
    return _text(state) == "running" and lease is not None and int(_text(lease)) < now_ms


@dataclass(frozen=True)
class UnroutedPage:
    """One slice of the open index: requests waiting for an agent nobody serves.

    Attributes:
        ids: open requests to a dead agent that no worker runs.
        next_start: where the next slice starts (None: the index was read to its end).
    """

    ids: list[str]
    next_start: int | None


class AgentDirectory:
    """Route leases of one Redis (any namespace).

    Args:
        redis: the client.
        now_ms: a pinned server time for tests (None: the Redis server's clock).
    """

    def __init__(self, redis: Redis, *, now_ms: int | None = None) -> None:
        self._redis = redis
        self._scripts = Scripts(redis)
        self._now = "" if now_ms is None else str(now_ms)

    async def register(self, namespace: str, agent_ids: Iterable[str], lease_s: float) -> int:
        """Open or extend the route lease of each agent to now + ``lease_s``; returns
        the expiry written (ms). A later expiry another worker wrote is kept.

        Raises:
            StoreUnavailable: Redis failed.
        """
        encoded = [encode_id(agent_id) for agent_id in agent_ids]
        return int(await self._scripts.call(
            "route_lease", [Keys(namespace).agents],
            [int(lease_s * 1000), self._now, *encoded]))

    async def expiry(self, namespace: str, agent_id: str) -> int | None:
        """The route lease expiry (ms) of ``agent_id``, or None when it has none.

        Raises:
            StoreUnavailable: Redis failed.
        """
        with store_errors("route lease"):
            raw = await self._redis.hget(Keys(namespace).agents,  # type: ignore[misc]
                                         encode_id(agent_id))
        return None if raw is None else int(_text(raw))

    async def dead(self, namespace: str, *, horizon_s: float) -> DeadRoutes:
        """The agents whose route lease expired less than ``horizon_s`` ago (older
        entries are deleted: no request accepted while they were live is still open).

        Raises:
            StoreUnavailable: Redis failed.
        """
        raw = await self._scripts.call("route_dead", [Keys(namespace).agents],
                                       [int(horizon_s * 1000), self._now])
        return DeadRoutes(int(raw[0]), frozenset(_text(agent) for agent in raw[1:]))

    async def unrouted(self, namespace: str, dead: DeadRoutes, *, start: int,
                       count: int) -> UnroutedPage:
        """Read ``count`` entries of the open index from ``start`` and return the requests
        to an agent in ``dead`` that no worker is running: ``accepted``/``dispatched``, or
        ``running`` with an expired turn lease (its worker is gone).

        Raises:
            StoreUnavailable: Redis failed.
        """
        keys = Keys(namespace)
        targets = {f"agent:{agent}" for agent in dead.agents}
        with store_errors("unrouted scan"):
            ids = [_text(i) for i in await self._redis.zrange(keys.open, start,
                                                              start + count - 1)]
            async with self._redis.pipeline(transaction=False) as pipe:
                for message_id in ids:
                    pipe.hmget(keys.message(message_id), ["to", "state", "lease"])
                rows = await pipe.execute()
        found = [message_id for message_id, (to, state, lease) in zip(ids, rows, strict=True)
                 if to is not None and _text(to) in targets
                 and _unattended(state, lease, dead.now_ms)]
        return UnroutedPage(found, start + count if len(ids) == count else None)
