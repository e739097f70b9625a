"""The telemetry hooks in one process (fakeredis and real Redis): the no-op path writes
and instruments nothing; the OpenTelemetry path stores the traceparent in the request
record and records the metrics, with denials counted in their buckets."""

from __future__ import annotations

from typing import Any

import anyio
import pytest
from opentelemetry.sdk.metrics.export import HistogramDataPoint, NumberDataPoint
from redis.asyncio import Redis

from sharedos_redis.kernel.contracts import MessageEnvelope, agent, format_timestamp
from sharedos_redis.kernel.ids import new_id
from sharedos_redis.observability import BUCKETS, bucket_of, configure, telemetry
from sharedos_redis.observability import names as n
from sharedos_redis.store.keys import Keys
from sharedos_redis.worker.local import LocalWorker
from sharedos_redis.worker.reconciler import Reconciler

from ..worker.helpers import answer, ask, invoke_grant, make_host, put, send_grant
from .conftest import Sdk

pytestmark = pytest.mark.anyio



def _points(sdk: Sdk, name: str, ns: str) -> list[Any]:
    data = sdk.metrics.get_metrics_data()
    found: list[Any] = []
    for resource in data.resource_metrics if data else ():
        for scope in resource.scope_metrics:
            for metric in scope.metrics:
                if metric.name == name:
                    found += [p for p in metric.data.data_points
                              if p.attributes.get(n.NAMESPACE) == ns]
    return found


def _host(redis: Redis, ns: str) -> Any:
    return make_host(redis, ns, {"bob": ask("alice", {"q": "status?"}),
                                 "eve": ask("alice", {"q": "let me in"}),
                                 "alice": answer({"status": "green"})})


@pytest.mark.usefixtures("served")  # no worker runs
async def test_without_otel_nothing_is_instrumented_or_stored(
        redis: Redis, ns: str, cleanup: None) -> None:
    configure(False)
    assert not telemetry().enabled and telemetry().traceparent() == ""
    host = make_host(redis, ns, {"bob": ask("alice", {}), "alice": answer({})},
                     request_timeout_s=0.3, turn_timeout_s=0.2, lease_s=0.3)
    assert "invoke_tool" not in vars(host.kernel)  # the kernel's own method, unwrapped
    await put(host, send_grant(ns, "bob", "alice"), invoke_grant(ns, "bob"))
    async with host:
        await host.start_turn("bob", {}, purpose="atlas-status")  # no worker: times out
    [(_, fields)] = await redis.xrange(Keys(ns).outbox)
    assert set(fields) == {b"id"}
    record = await redis.hgetall(Keys(ns).message(fields[b"id"].decode()))
    assert b"env" in record and b"tp" not in record


async def test_metrics_count_outcomes_buckets_turns_and_relay_lag(
        redis: Redis, ns: str, sdk: Sdk, cleanup: None) -> None:
    host = _host(redis, ns)
    assert "invoke_tool" in vars(host.kernel)
    await put(host, send_grant(ns, "bob", "alice"), invoke_grant(ns, "bob"),
              invoke_grant(ns, "alice"), invoke_grant(ns, "eve"),
              send_grant(ns, "eve", "carol"))
    async with host, LocalWorker(host):
        with anyio.fail_after(10):
            replied = await host.start_turn("bob", {}, purpose="atlas-status")
            denied = await host.start_turn("eve", {}, purpose="atlas-status")  # none to alice
            spent = await host.start_turn("bob", {}, purpose="atlas-status", hops=0)
    assert replied.output["status"] == "succeeded"  # type: ignore[index]
    assert denied.output["status"] == "denied"  # type: ignore[index]
    assert spent.output["error"]["details"]["code"] == "budget_exhausted"  # type: ignore[index]
    requests = {(p.attributes[n.CODE], p.attributes[n.BUCKET]): p.value
                for p in _points(sdk, n.REQUESTS, ns)}
    assert requests == {("replied", "none"): 1, ("no_matching_grant", "authorization"): 1,
                        ("budget_exhausted", "policy"): 1}
    denials = {p.attributes[n.BUCKET]: p.value for p in _points(sdk, n.DENIALS, ns)}
    assert denials == {"authorization": 1, "policy": 1}
    assert [p.value for p in _points(sdk, n.BUDGET_EXHAUSTED, ns)] == [1]
    turns = {p.attributes[n.CODE]: p for p in _points(sdk, n.TURN_DURATION, ns)}
    assert all(isinstance(p, HistogramDataPoint) for p in turns.values())
    assert {code: p.count for code, p in turns.items()} == {"replied": 1, "succeeded": 3}
    [lag] = _points(sdk, n.RELAY_LAG, ns)
    assert lag.count == 1 and 0 <= lag.sum < 10
    latency = _points(sdk, n.REQUEST_DURATION, ns)
    assert sum(p.count for p in latency) == 3
    spans = [s for s in sdk.spans.get_finished_spans() if s.name == n.SPAN_TURN]
    assert len(spans) == 4  # three root turns and alice's


@pytest.mark.usefixtures("served")  # no worker runs
async def test_reconciler_actions_are_counted(redis: Redis, ns: str, sdk: Sdk,
                                              cleanup: None) -> None:
    host = make_host(redis, ns, {"bob": answer({}), "alice": answer({})},
                     request_timeout_s=0.2, turn_timeout_s=0.1, lease_s=0.2)
    context = host.context_for("bob", purpose="atlas-status", trace_id="trace-r")
    envelope = MessageEnvelope(id=new_id(), sender=agent("bob"), receiver=agent("alice"),
                               purpose="atlas-status", payload={}, trace_id="trace-r",
                               created_at=format_timestamp())
    assert (await host.transport.deliver(context, envelope)).status == "accepted"

    async def rewake(namespace: str, message_id: str, reason: str) -> None:
        return None

    reconciler = Reconciler(host, LocalWorker(host).services.relay, rewake)
    with anyio.fail_after(5):  # nobody waits and no worker runs: the deadline passes
        while True:
            if (await reconciler.reconcile_once())["timed_out"]:
                break
            await anyio.sleep(0.05)
    actions = {p.attributes[n.ACTION]: p.value for p in _points(sdk, n.RECONCILER_ACTIONS, ns)}
    assert actions == {"timed_out": 1}  # passes that touched nothing add nothing
    assert all(isinstance(p, NumberDataPoint) for p in _points(sdk, n.RECONCILER_ACTIONS, ns))


def test_every_reason_code_has_one_bucket() -> None:
    from sharedos_redis.kernel.reasons import REASON_CODES

    assert {bucket_of(code) for code in REASON_CODES} <= set(BUCKETS)
    assert bucket_of("usage_store_unavailable") == "infrastructure"
    assert bucket_of("audit_unavailable") == "infrastructure"
    assert bucket_of("host_policy_denied") == "policy"
    assert bucket_of("recipient_unknown") == "route"
    assert bucket_of("no_matching_grant") == "authorization"
    assert bucket_of("request_timed_out") == "failure"
    assert bucket_of("escalated") == "escalation"
    assert bucket_of("replied") == bucket_of(None) == "none"
    assert bucket_of("<script>") == "failure"  # an unknown code is never a denial bucket


async def test_a_model_cannot_choose_the_trace_context(redis: Redis, ns: str, sdk: Sdk,
                                                       cleanup: None) -> None:
    forged = "00-" + "f" * 32 + "-" + "e" * 16 + "-01"
    host = make_host(redis, ns, {
        "bob": ask("alice", {"traceparent": forged, "tp": forged}),  # in the payload
        "mallory": _extra_argument(forged),                           # beside it
        "alice": answer({"status": "green"})})
    await put(host, send_grant(ns, "bob", "alice"), send_grant(ns, "mallory", "alice"),
              invoke_grant(ns, "bob"), invoke_grant(ns, "mallory"), invoke_grant(ns, "alice"))
    async with host, LocalWorker(host):
        with anyio.fail_after(10):
            replied = await host.start_turn("bob", {}, purpose="atlas-status")
            refused = await host.start_turn("mallory", {}, purpose="atlas-status")
    assert replied.output["status"] == "succeeded"  # type: ignore[index]
    assert refused.output["error"]["code"] == "invalid_tool_arguments"  # type: ignore[index]
    spans = sdk.spans.get_finished_spans()
    [request] = [s for s in spans if s.name == n.SPAN_REQUEST
                 and (s.attributes or {}).get(n.SENDER) == "agent:bob"]
    [alice] = [s for s in spans if s.name == n.SPAN_TURN
               and (s.attributes or {}).get(n.RECIPIENT) == "agent:alice"]
    assert alice.parent is not None and alice.parent.span_id == request.context.span_id
    assert alice.context.trace_id == request.context.trace_id != int("f" * 32, 16)
    assert all(s.context.trace_id != int("f" * 32, 16) for s in spans)


def _extra_argument(forged: str) -> Any:
    async def script(turn: Any, host: Any) -> Any:
        result = await host.call("messages.request", {
            "recipient": {"kind": "agent", "agentId": "alice"}, "payload": {},
            "traceparent": forged})
        return result.to_wire()
    return script
