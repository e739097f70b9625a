"""Round trips: one per accept, one per dispatched entry plus one read per batch."""

from __future__ import annotations

from typing import Any

import pytest
from redis.asyncio import Redis

from sharedos_redis.transport import OutboxRelay, RedisStreamTransport

from ..support import Keyspace, make_context, make_envelope

pytestmark = [pytest.mark.anyio, pytest.mark.usefixtures("served")]  # no worker runs


def _count_commands(redis: Redis) -> list[str]:
    sent: list[str] = []
    original = redis.execute_command

    async def counting(*args: Any, **options: Any) -> Any:
        sent.append(str(args[0]))
        return await original(*args, **options)

    redis.execute_command = counting  # type: ignore[method-assign]
    return sent


async def test_accept_is_one_round_trip_and_dispatch_one_per_entry(
    redis: Redis, ns: str, keyspace: Keyspace
) -> None:
    transport = RedisStreamTransport(redis)
    ctx = make_context(ns)

    async def wake(namespace: str, message_id: str) -> None:
        pass

    relay = OutboxRelay(redis, [ns], wake, consumer="r1", block_ms=0)
    await relay.ensure_groups()
    await transport.deliver(ctx, make_envelope(ctx, id="warm"))  # loads the scripts
    await relay.step()
    sent = _count_commands(redis)

    await transport.deliver(ctx, make_envelope(ctx, id="m-1"))
    assert sent == ["EVALSHA"]  # the route check included
    sent.clear()
    for i in range(3):
        await transport.deliver(ctx, make_envelope(ctx, id=f"b-{i}"))
    sent.clear()

    assert await relay.step() == 4
    assert sent == ["XREADGROUP"] + ["EVALSHA"] * 4
    # with the trace index and the agent directory; markers warm, m-1, b-0..2
    assert len(await keyspace()) == 7 + 4
