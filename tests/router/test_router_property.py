"""Property: any order of settlements (with forged and duplicate replies mixed in)
resolves each waiter exactly once, with its own outcome."""

from __future__ import annotations

import uuid
from typing import Any

import anyio
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from redis.asyncio import Redis

from sharedos_redis.errors import RequestFailed
from sharedos_redis.kernel.contracts import DeliveryAccepted, agent, format_timestamp
from sharedos_redis.router import RedisRequestRouter, RouterSettings
from sharedos_redis.store.markers import MarkerStore

from .router_support import (
    ObservedMarkers,
    make_context,
    make_reply,
    make_request,
    now_ms,
    put_markers,
    scan_keyspace,
)

pytestmark = pytest.mark.anyio

_plan = st.fixed_dictionaries({
    "kind": st.sampled_from(["reply", "failed"]),
    "early": st.booleans(),     # settled before its waiter starts
    "forged": st.booleans(),    # a reply from the wrong sender arrives first
    "duplicate": st.booleans(), # a second reply arrives after the settlement
})
# every draw happens before the test body: a draw inside an anyio test (st.data()) can raise
# hypothesis' StopTest, a BaseException that kills anyio's test runner task
_cases = st.lists(_plan, min_size=1, max_size=6).flatmap(
    lambda plans: st.tuples(st.just(plans), st.permutations(range(len(plans)))))


async def _settle(markers: MarkerStore, ns: str, request: Any, plan: dict[str, Any]) -> None:
    if plan["forged"]:
        forged = make_reply(request, sender=agent("mallory"), payload={"answer": "forged"})
        assert not (await markers.settle_reply(ns, forged)).settled
    if plan["kind"] == "reply":
        assert (await markers.settle_reply(ns, make_reply(request))).settled
    else:
        code = f"code_{request.id}"
        assert (await markers.settle_failure(ns, request.id, state="failed", code=code)).settled
    if plan["duplicate"]:
        again = make_reply(request, id=f"dup-{request.id}", payload={"answer": "duplicate"})
        assert not (await markers.settle_reply(ns, again)).settled


@settings(max_examples=20, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(case=_cases)
async def test_any_settlement_order_resolves_each_waiter_once(
        redis: Redis, case: tuple[list[dict[str, Any]], list[int]]) -> None:
    plans, order = case
    ns = f"t-{uuid.uuid4().hex[:12]}"
    context = make_context(ns)
    requests = [make_request(context, id=f"m-{i}") for i in range(len(plans))]
    settler = MarkerStore(redis)
    outcomes: list[tuple[str, Any]] = []
    try:
        await put_markers(redis, context, requests, deadline_ms=now_ms() + 30_000)
        for i in order:
            if plans[i]["early"]:
                await _settle(settler, ns, requests[i], plans[i])
        markers = ObservedMarkers(redis)
        fast = RouterSettings(listener_block_ms=20, grace_ms=20, max_concurrent_checks=4)
        async with RedisRequestRouter(redis, settings=fast, markers=markers) as router:

            async def wait(request: Any) -> None:
                receipt = DeliveryAccepted(message_id=request.id, timestamp=format_timestamp())
                try:
                    outcomes.append((request.id, await router.resolve_reply(
                        context, request, receipt)))
                except RequestFailed as exc:
                    outcomes.append((request.id, exc.code))

            with anyio.fail_after(10):
                async with anyio.create_task_group() as tg:
                    for request in requests:
                        tg.start_soon(wait, request)
                    await markers.wait_checks(len(requests))
                    for i in order:
                        if not plans[i]["early"]:
                            await _settle(settler, ns, requests[i], plans[i])
        assert sorted(mid for mid, _ in outcomes) == sorted(r.id for r in requests)
        for mid, outcome in outcomes:
            if plans[int(mid[2:])]["kind"] == "reply":
                assert (outcome.reply_to, outcome.payload) == (mid, {"answer": f"for {mid}"})
            else:
                assert outcome == f"code_{mid}"
    finally:
        leftover = await scan_keyspace(redis, ns)
        if leftover:
            await redis.delete(*leftover)
