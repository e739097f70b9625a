"""cascade_cancel.lua called directly: its refusals (an open or unknown root, a trace
index that changed since the caller read it) change nothing."""

from __future__ import annotations

import json
from typing import Any

import pytest
from redis.asyncio import Redis

from sharedos_redis.kernel.contracts import format_timestamp
from sharedos_redis.store.keys import Keys
from sharedos_redis.store.markers import MarkerStore
from sharedos_redis.store.scripts import Scripts
from sharedos_redis.store.tree import CASCADE_CODE

from ..router.tree_support import Built, build_tree
from ..support import drop_namespace

pytestmark = pytest.mark.anyio


async def _call(redis: Redis, ns: str, root: str, ids: list[str]) -> list[str]:
    k = Keys(ns)
    named = {"root": root, "ids": ids, "events": [f"e-{i}" for i in range(len(ids))],
             "code": CASCADE_CODE, "now": "", "at": format_timestamp(), "retention": 60_000,
             "settled_maxlen": 1000, "audit_maxlen": 1000}
    raw: list[Any] = await Scripts(redis).call(
        "cascade_cancel", [k.message(root), k.trace("t"), k.open, k.leases, k.settled, k.audit,
                           *(k.message(mid) for mid in ids)], [json.dumps(named)])
    return [item.decode() if isinstance(item, bytes) else str(item) for item in raw]


@pytest.fixture
async def built(redis: Redis, ns: str) -> Any:
    yield await build_tree(redis, ns, "t", [2, 1])
    await drop_namespace(redis, ns)


async def _open(redis: Redis, ns: str) -> int:
    return int(await redis.zcard(Keys(ns).open))


async def test_refusals_change_nothing(redis: Redis, ns: str, built: Built) -> None:
    assert await _call(redis, ns, "root", built.ids) == ["request_open"]
    assert await _call(redis, ns, "nobody", built.ids) == ["unknown_request"]
    await MarkerStore(redis).settle_failure(ns, "root", state="cancelled",
                                            code="request_cancelled")
    assert await _call(redis, ns, "root", built.ids[:-1]) == ["trace_changed"]
    assert await _open(redis, ns) == len(built.ids) - 1  # all but the root


async def test_the_descendants_are_cancelled_in_tree_order(redis: Redis, ns: str,
                                                           built: Built) -> None:
    await MarkerStore(redis).settle_failure(ns, "root", state="cancelled",
                                            code="request_cancelled")
    result = await _call(redis, ns, "root", built.ids)
    assert result[0] == "cascaded" and result[1:] == built.ids[1:]  # breadth first
    assert await _open(redis, ns) == 0
    assert await _call(redis, ns, "root", built.ids) == ["cascaded"]  # nothing left
