"""The floor: raw Redis Streams request/reply, no authorization, no arq.

A requester XADDs ``{id, p}`` to a request stream; a responder task (same process, own
connection) blocking-reads it and XADDs ``{id}`` to the process's one reply stream;
one reader task (own connection) blocking-reads that stream and wakes the local
waiter — one reply stream and one reader per process, as in FACTS.md.
"""

from __future__ import annotations

import itertools
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import anyio
from redis.asyncio import Redis

from .stats import RoundTrip

__all__ = ["floor_round_trip"]

_BLOCK_MS = 100
_MAXLEN = 20_000


class _Floor:
    def __init__(self, url: str, prefix: str, payload: bytes) -> None:
        self.url, self.payload = url, payload
        self.requests, self.replies = f"{prefix}:req", f"{prefix}:rep"
        self.client = Redis.from_url(url)
        self.waiters: dict[str, anyio.Event] = {}
        self.ids = itertools.count()
        self.stopping = False

    async def round_trip(self) -> None:
        key = str(next(self.ids))
        event = self.waiters[key] = anyio.Event()
        try:
            await self.client.xadd(self.requests, {"id": key, "p": self.payload},
                                   maxlen=_MAXLEN, approximate=True)
            with anyio.fail_after(10):
                await event.wait()
        finally:
            del self.waiters[key]

    async def _read(self, conn: Redis, key: str, last: str) -> tuple[str, list[Any]]:
        response = await conn.xread({key: last}, count=500, block=_BLOCK_MS)
        entries: list[Any] = [e for _, batch in response or [] for e in batch]
        if entries:
            last = entries[-1][0].decode()
        return last, entries

    async def responder(self) -> None:
        conn, last = Redis.from_url(self.url), "0-0"  # fresh streams: no start race
        try:
            while not self.stopping:
                last, entries = await self._read(conn, self.requests, last)
                if entries:
                    pipe = conn.pipeline(transaction=False)
                    for _, fields in entries:
                        pipe.xadd(self.replies, {"id": fields[b"id"], "p": fields[b"p"]},
                                  maxlen=_MAXLEN, approximate=True)
                    await pipe.execute()
        finally:
            await conn.aclose()

    async def reader(self) -> None:
        conn, last = Redis.from_url(self.url), "0-0"  # fresh streams: no start race
        try:
            while not self.stopping:
                last, entries = await self._read(conn, self.replies, last)
                for _, fields in entries:
                    event = self.waiters.get(fields[b"id"].decode())
                    if event is not None:
                        event.set()
        finally:
            await conn.aclose()


@asynccontextmanager
async def floor_round_trip(url: str, prefix: str, payload: bytes) -> AsyncIterator[RoundTrip]:
    """Run the responder and reader; yield one request/reply carrying ``payload`` both
    ways; delete the streams after."""
    floor = _Floor(url, prefix, payload)
    try:
        async with anyio.create_task_group() as tg:
            tg.start_soon(floor.responder)
            tg.start_soon(floor.reader)
            try:
                yield floor.round_trip
            finally:
                floor.stopping = True  # readers end within _BLOCK_MS; never cancel a blocked read
    finally:
        await floor.client.delete(floor.requests, floor.replies)
        await floor.client.aclose()
