"""Read-only views of one namespace the fault tests assert on."""

from __future__ import annotations

from collections import Counter

from redis.asyncio import Redis

from sharedos_redis.errors import UnknownMessage
from sharedos_redis.store.keys import Keys, decode_id
from sharedos_redis.worker.host import MessagingHost

__all__ = ["event_counts", "keyspace", "message_ids", "settlements", "states"]


async def keyspace(redis: Redis, ns: str) -> set[str]:
    """Every key of ``ns`` (SCAN on the namespace's own prefix)."""
    return {key.decode() async for key in redis.scan_iter(match=Keys(ns).prefix + "*",
                                                          count=1000)}


async def message_ids(redis: Redis, ns: str) -> list[str]:
    """The ids of every request marker of ``ns``."""
    marker = Keys(ns).prefix + "msg:"
    return sorted(decode_id(key[len(marker):]) for key in await keyspace(redis, ns)
                  if key.startswith(marker))


async def states(redis: Redis, ns: str, ids: list[str]) -> dict[str, str | None]:
    """The marker state of each request id (None when the marker is gone)."""
    pipe = redis.pipeline(transaction=False)
    for mid in ids:
        pipe.hget(Keys(ns).message(mid), "state")
    rows = await pipe.execute()
    return {mid: None if raw is None else raw.decode() for mid, raw in zip(ids, rows, strict=True)}


async def settlements(redis: Redis, ns: str) -> Counter[str]:
    """How many settlement entries each request id has in ``Keys(ns).settled``."""
    counts: Counter[str] = Counter()
    for _, fields in await redis.xrange(Keys(ns).settled, "-", "+"):
        counts[fields[b"id"].decode()] += 1
    return counts


async def event_counts(host: MessagingHost, message_id: str) -> Counter[str]:
    """Audit event types naming ``message_id`` (the request's timeline), counted."""
    try:
        events = await host.router.timeline(host.namespace, message_id)
    except UnknownMessage:
        return Counter()
    return Counter(event.type for event in events)
