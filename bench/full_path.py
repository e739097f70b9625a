"""The full sharedos-redis path: ``messages.request`` from a requester's context to a
no-op recipient turn and back, measured on the requester side.

One round trip = ``host.kernel.invoke_tool(context, ToolCall(messages.request))``:
authorization (grant lookup + consume), accept script (marker, open index, outbox,
audit), ``message.sent`` audit, relay → arq enqueue → worker poll → recipient
admission and turn → reply settlement → listener wake-up → reply validation →
``tool.invoked`` audit. The worker is a separate process
(``sharedos_redis.worker.cli worker --app bench.app:host``), or, for reference,
a :class:`LocalWorker` on fakeredis in this process.
"""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator
from contextlib import ExitStack, asynccontextmanager
from typing import Any

import anyio
import fakeredis
from redis.asyncio import Redis

from sharedos_redis.kernel.contracts import JsonValue, ToolCall, format_timestamp
from sharedos_redis.kernel.ids import new_id
from sharedos_redis.kernel.messaging import MESSAGES_REQUEST
from sharedos_redis.observability import configure
from sharedos_redis.store.keys import Keys
from sharedos_redis.worker.host import MessagingHost
from sharedos_redis.worker.local import LocalWorker

from .app import RECIPIENT, REQUESTER, build, grants, named_client
from .procs import RESULTS, running
from .stats import RoundTrip

__all__ = ["BenchFailure", "drop_namespace", "fake_path", "full_path", "request_round_trip"]

_BUDGET = 1_000_000_000


class BenchFailure(Exception):
    """A round trip did not end the way the benchmark expects; ``result`` is its wire form."""

    def __init__(self, result: dict[str, Any]) -> None:
        super().__init__(f"messages.request ended {json.dumps(result)}")
        self.result = result


def request_round_trip(host: MessagingHost, trace_id: str, payload: JsonValue,
                       *, expect: str = "succeeded") -> RoundTrip:
    """One ``messages.request`` from ``requester`` to ``echo`` in ``host``'s namespace."""
    arguments: dict[str, JsonValue] = {
        "recipient": {"kind": "agent", "agentId": RECIPIENT}, "payload": payload}

    async def round_trip() -> None:
        context = host.context_for(REQUESTER, purpose="bench", trace_id=trace_id)
        call = ToolCall(id=new_id(), tool=MESSAGES_REQUEST, arguments=arguments,
                        trace_id=trace_id, requested_at=format_timestamp())
        result = await host.kernel.invoke_tool(context, call)
        if result.status != expect:
            raise BenchFailure(result.to_wire())

    return round_trip


async def drop_namespace(redis: Redis, namespace: str) -> int:
    """Delete every key of ``namespace`` (SCAN on its own prefix; admin path)."""
    prefix = Keys(namespace).prefix
    pattern = prefix.replace("[", "\\[").replace("?", "\\?").replace("*", "\\*") + "*"
    batch: list[bytes] = []
    deleted = 0
    async for key in redis.scan_iter(match=pattern, count=1000):
        batch.append(key)
        if len(batch) >= 1000:
            deleted += await redis.delete(*batch)
            batch.clear()
    if batch:
        deleted += await redis.delete(*batch)
    return deleted


async def prepare(host: MessagingHost, namespace: str) -> str:
    """Store the grants and open one trace with a budget no run exhausts; its id."""
    for grant in grants(namespace):
        await host.grant_store.put(grant)
    trace_id = f"trace-{namespace}"
    await host.budget.set(namespace, trace_id, _BUDGET)
    return trace_id


async def _serving(logs: list[str]) -> None:
    """Wait (30 s at most) until every worker process logged that it serves its queue
    (the worker's log file is the only signal a starting process gives)."""
    for _ in range(600):
        if all("serving namespace" in (RESULTS / f"{log}.log").read_text("utf-8", "replace")
               for log in logs):
            return
        await anyio.sleep(0.05)
    raise TimeoutError(f"worker processes not serving after 30 s: {logs}")


@asynccontextmanager
async def full_path(url: str, namespace: str, payload: JsonValue, *, otel: bool = False,
                    workers: int = 1) -> AsyncIterator[tuple[MessagingHost, RoundTrip]]:
    """Start ``workers`` worker processes; yield the app-side host and its round trip.

    ``otel``: tracing and metrics on in both processes (``bench.otel``); otherwise off
    in both (the no-op hooks, as without the ``otel`` extra).
    """
    if otel:
        from .otel import install_sdk

        install_sdk()
    else:
        configure(False)
    redis = named_client(url, f"bench-app-{namespace}")
    host = build(redis, namespace, url=url)
    env = {"SHAREDOS_REDIS_URL": url, "SHAREDOS_NAMESPACE": namespace,
           **({"BENCH_OTEL": "1"} if otel else {"OTEL_SDK_DISABLED": "true"})}
    cli = ["-m", "sharedos_redis.worker.cli", "worker", "--app", "bench.app:host"]
    try:
        trace_id = await prepare(host, namespace)
        name = "sharedos-worker-otel" if otel else "sharedos-worker"
        logs = [f"{name}-{index}" if index else name for index in range(workers)]
        with ExitStack() as procs:
            for log_name in logs:
                procs.enter_context(running(cli, env, log_name))
            await _serving(logs)
            async with host:
                round_trip = request_round_trip(host, trace_id, payload)
                started = time.perf_counter()
                with anyio.fail_after(30):
                    await round_trip()
                print(f"  sharedos worker ready in {time.perf_counter() - started:.1f}s",
                      flush=True)
                yield host, round_trip
    finally:
        await drop_namespace(redis, namespace)
        await redis.aclose()


@asynccontextmanager
async def fake_path(namespace: str, payload: JsonValue, *, otel: bool = False
                    ) -> AsyncIterator[RoundTrip]:
    """The same round trip on an embedded fakeredis with a :class:`LocalWorker`
    (``otel``: with the OpenTelemetry SDK on, one process for requester and recipient)."""
    if otel:
        from .otel import install_sdk

        install_sdk()
    else:
        configure(False)
    redis = fakeredis.FakeAsyncRedis(server=fakeredis.FakeServer())
    host = build(redis, namespace)
    try:
        trace_id = await prepare(host, namespace)
        async with host, LocalWorker(host):
            yield request_round_trip(host, trace_id, payload)
    finally:
        await redis.aclose()
