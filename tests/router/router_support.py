"""Plain helpers for router tests: requests, markers in the accept layout, replies, keyspace."""

from __future__ import annotations

from typing import Any

import anyio
import anyio.lowlevel
from redis.asyncio import Redis

from sharedos_redis.kernel.contracts import (
    AccessContext,
    Address,
    MessageEnvelope,
    agent,
    format_timestamp,
)
from sharedos_redis.store.keys import Keys, address_tag
from sharedos_redis.store.markers import MarkerStore

from ..support import Keyspace, make_context, now_ms, scan_keyspace

__all__ = ["Keyspace", "make_context", "now_ms", "scan_keyspace"]


def make_request(context: AccessContext, *, id: str = "m-1",
                 receiver: Address | None = None) -> MessageEnvelope:
    return MessageEnvelope(id=id, sender=context.actor, receiver=receiver or agent("alice"),
                           purpose=context.purpose, trace_id=context.trace_id,
                           payload={"question": "Atlas status?"}, created_at=context.now)


def make_reply(request: MessageEnvelope, **changes: Any) -> MessageEnvelope:
    """The correct reply to ``request`` unless ``changes`` (field names) say otherwise."""
    fields: dict[str, Any] = {
        "id": f"r-{request.id}", "sender": request.receiver, "receiver": request.sender,
        "purpose": request.purpose, "trace_id": request.trace_id,
        "payload": {"answer": f"for {request.id}"}, "created_at": format_timestamp(),
        "reply_to": request.id,
    }
    fields.update(changes)
    return MessageEnvelope(**fields)


def marker_fields(context: AccessContext, request: MessageEnvelope, *, deadline_ms: int,
                  created_ms: int, state: str = "accepted") -> dict[str, str]:
    """Exactly what accept_request.lua writes into the marker hash."""
    return {
        "env": request.to_json(), "ctx": context.to_json(), "state": state,
        "from": address_tag(request.sender.kind, request.sender.id),
        "to": address_tag(request.receiver.kind, request.receiver.id),
        "purpose": request.purpose, "trace": request.trace_id, "created": str(created_ms),
        "deadline": str(deadline_ms), "attempts": "0", "updated": str(created_ms),
    }


async def put_marker(redis: Redis, context: AccessContext, request: MessageEnvelope, *,
                     deadline_ms: int | None = None, state: str = "accepted",
                     retention_ms: int = 60_000) -> int:
    """Write an open marker like the accept script (without outbox and budget); its deadline."""
    await put_markers(redis, context, [request], deadline_ms=deadline_ms, state=state,
                      retention_ms=retention_ms)
    return deadline_ms or 0


async def put_markers(redis: Redis, context: AccessContext, requests: list[MessageEnvelope], *,
                      deadline_ms: int | None = None, state: str = "accepted",
                      retention_ms: int = 60_000) -> None:
    created = now_ms()
    deadline = deadline_ms if deadline_ms is not None else created + 30_000
    keys = Keys(context.namespace_id)
    pipe = redis.pipeline(transaction=False)
    for request in requests:
        key = keys.message(request.id)
        pipe.hset(key, mapping=marker_fields(context, request, deadline_ms=deadline,
                                             created_ms=created, state=state))
        pipe.pexpireat(key, deadline + retention_ms)
        pipe.zadd(keys.open, {request.id: deadline})
    await pipe.execute()


async def state_of(redis: Redis, ns: str, message_id: str) -> str | None:
    raw = await redis.hget(Keys(ns).message(message_id), "state")
    return None if raw is None else raw.decode()


class ObservedMarkers(MarkerStore):
    """A real MarkerStore that counts the router's durable marker checks (no behaviour change)."""

    def __init__(self, redis: Redis, **kwargs: Any) -> None:
        super().__init__(redis, **kwargs)
        self.checks = 0
        self.in_flight = self.max_in_flight = 0
        self._changed = anyio.Event()

    async def fields(self, namespace: str, message_id: str,
                     names: tuple[str, ...]) -> list[str | None]:
        self.in_flight += 1
        self.max_in_flight = max(self.max_in_flight, self.in_flight)
        try:
            await anyio.lowlevel.checkpoint()  # let every other ready waiter try to overlap
            result = await super().fields(namespace, message_id, names)
        finally:
            self.in_flight -= 1
        self.checks += 1
        self._changed.set()
        return result

    async def wait_checks(self, count: int) -> None:
        """Return once at least ``count`` durable checks completed."""
        while self.checks < count:
            self._changed = anyio.Event()
            if self.checks >= count:
                break
            await self._changed.wait()
