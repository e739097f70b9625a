"""Live revocation on the Redis host: a revocation reaches the next call of a running turn.

Runs on fakeredis and on real Redis (REDIS_URL) with the in-process LocalWorker.
"""

from __future__ import annotations

from datetime import UTC, datetime

import anyio
import pytest
from redis.asyncio import Redis

from sharedos_redis.kernel.contracts import JsonValue, agent, format_timestamp
from sharedos_redis.kernel.turn import RuntimeHost, TurnRequest
from sharedos_redis.worker.host import MessagingHost
from sharedos_redis.worker.local import LocalWorker

from .helpers import grant, invoke_grant, make_host, put, read_file_handler, tool

pytestmark = pytest.mark.anyio



@pytest.mark.parametrize(("live", "codes"), [
    (True, [None, "tool_unavailable"]),  # a fixed-requirement tool whose grant is gone hides
    (False, [None, None]),               # snapshot: the turn keeps what it was admitted with
])
async def test_a_revocation_mid_turn_reaches_the_next_call_only_when_live(
        redis: Redis, ns: str, cleanup: None, live: bool, codes: list[str | None]) -> None:
    hosts: list[MessagingHost] = []
    read = grant(ns, "bob", "files", ("bob",), "read")

    async def bob(turn: TurnRequest, host: RuntimeHost) -> JsonValue:
        first = await host.call("files.bob", {})
        await hosts[0].grant_store.revoke(ns, agent("bob"), read.id,
                                          format_timestamp(datetime.now(UTC)))
        again = await host.call("files.bob", {})
        return [getattr(r, "error", None) and r.error.code for r in (first, again)]

    host = make_host(redis, ns, {"bob": bob}, live_revocation=live)
    hosts.append(host)
    host.register_tool(tool("files.bob", "files", ("bob",)), read_file_handler)
    await put(host, invoke_grant(ns, "bob"), read)
    async with host, LocalWorker(host):
        with anyio.fail_after(10):
            result = await host.start_turn("bob", {}, purpose="p")
    assert result.status == "succeeded" and result.output == codes
