"""Many concurrent waiting requests: connections, process RSS, Redis memory per request.

``n`` requests with a 200-byte payload go to ``echo`` in a namespace no worker
runs (the bench holds the route lease a worker would), so each is accepted and then
waits in ``messages.request``. Once all are
waiting: count this process's connections (``CLIENT LIST``, by client name), read
the RSS, and sum ``MEMORY USAGE`` over the namespace's keys by kind. Then every
request is cancelled (``router.cancel``), all ``n`` calls return, and the
namespace is deleted.
"""

from __future__ import annotations

import json
import time
from collections import Counter
from typing import Any

import anyio
from redis.asyncio import Redis

from sharedos_redis.kernel.contracts import JsonValue
from sharedos_redis.store.directory import AgentDirectory
from sharedos_redis.store.keys import Keys
from sharedos_redis.worker.host import MessagingHost
from sharedos_redis.worker.settings import HostSettings

from .app import build, named_client
from .full_path import BenchFailure, drop_namespace, prepare, request_round_trip

__all__ = ["payload_of", "rss_kb", "waiters"]

_KINDS = ("msg", "budget", "grants", "open", "outbox", "audit", "settled", "usage", "leases",
          "trace", "agents")


def payload_of(size: int) -> JsonValue:
    """A JSON payload whose compact encoding is ``size`` bytes."""
    return {"data": "x" * max(0, size - len(json.dumps({"data": ""}, separators=(",", ":"))))}


def rss_kb() -> int:
    """This process's resident set size (VmRSS), in KiB."""
    with open("/proc/self/status", encoding="ascii") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


async def _connections(admin: Redis, name: str) -> tuple[int, int]:
    """This process's connections, and those blocked in a read (the listener)."""
    clients: list[dict[str, Any]] = await admin.client_list()
    ours = [c for c in clients if c.get("name") == name]
    return len(ours), sum(1 for c in ours if "b" in str(c.get("flags", "")))


async def _memory_by_kind(admin: Redis, namespace: str) -> dict[str, int]:
    prefix = Keys(namespace).prefix.encode()
    keys = [k async for k in admin.scan_iter(match=prefix.decode() + "*", count=1000)]
    usage: Counter[str] = Counter()
    for start in range(0, len(keys), 500):
        chunk = keys[start:start + 500]
        pipe = admin.pipeline(transaction=False)
        for key in chunk:
            pipe.memory_usage(key, samples=0)
        for key, size in zip(chunk, await pipe.execute(), strict=True):
            rest = key.removeprefix(prefix).decode()
            usage[next((k for k in _KINDS if rest.startswith(k)), "other")] += int(size or 0)
    return dict(usage)


async def _until(check: Any, timeout_s: float) -> float:
    """Poll ``check()`` every 50 ms until true (benchmark bookkeeping, not a test)."""
    start = time.perf_counter()
    with anyio.fail_after(timeout_s):
        while True:
            if await check():
                break
            await anyio.sleep(0.05)
    return time.perf_counter() - start


async def _cancel_all(admin: Redis, host: MessagingHost, namespace: str) -> float:
    start = time.perf_counter()
    ids = [i.decode() for i in await admin.zrange(Keys(namespace).open, 0, -1)]
    limiter = anyio.CapacityLimiter(32)

    async def cancel(message_id: str) -> None:
        async with limiter:
            await host.router.cancel(namespace, message_id)

    async with anyio.create_task_group() as tg:
        for message_id in ids:
            tg.start_soon(cancel, message_id)
    return time.perf_counter() - start


def _outcome_key(exc: BenchFailure) -> str:
    """``request_cancelled`` (expected), or the failed call's code and details."""
    error = exc.result.get("error") if isinstance(exc.result, dict) else None
    if not isinstance(error, dict):
        return "unexpected"
    details = error.get("details")
    outcome = details.get("outcome") if isinstance(details, dict) else None
    return "cancelled" if outcome == "request_cancelled" else f"{error.get('code')}:{outcome}"


def _waiting(host: MessagingHost) -> int:
    # private, read only for the report: how many waiters the listener holds
    listener = getattr(host.router, "_listener", None)
    return len(getattr(listener, "_slots", {}))


async def _measure(admin: Redis, host: MessagingHost, namespace: str, name: str, n: int,
                   base: dict[str, int]) -> dict[str, Any]:
    memory = await _memory_by_kind(admin, namespace)
    used = int((await admin.info("memory"))["used_memory"])
    per_request = {k: round(v / n, 1) for k, v in memory.items()
                   if k not in ("grants", "usage", "agents")}
    connections, blocked = await _connections(admin, name)
    without_audit = sum(v for k, v in per_request.items() if k != "audit")
    return {
        "waiting": _waiting(host), "connections": connections, "blocked_connections": blocked,
        "redis_bytes_per_request_without_audit": round(without_audit, 1),
        "rss_kb": rss_kb(), "rss_delta_kb": rss_kb() - base["rss_kb"],
        "redis_bytes_by_kind": memory, "redis_bytes_per_request": per_request,
        "redis_bytes_per_request_total": round(sum(per_request.values()), 1),
        "used_memory_delta_per_request": round((used - base["used_memory"]) / n, 1),
    }


async def _start(tg: Any, host: MessagingHost, n: int, one: Any,
                 outcomes: Counter[str], batch: int = 500) -> float:
    """Start ``n`` calls in batches of ``batch``, each once the previous batch waits
    (10,000 calls at once would queue on the 32-connection pool past its timeout)."""
    start = time.perf_counter()
    for first in range(0, n, batch):
        started = min(n, first + batch)
        for _ in range(first, started):
            tg.start_soon(one)

        async def settled(started: int = started) -> bool:
            return _waiting(host) + sum(outcomes.values()) >= started

        await _until(settled, 60)
    return time.perf_counter() - start


async def waiters(url: str, namespace: str, n: int, *, payload_bytes: int = 200
                  ) -> dict[str, Any]:
    """Run the experiment (see the module doc); returns the report's ``waiters`` section."""
    name = f"bench-wait-{namespace}"
    admin, redis = Redis.from_url(url), named_client(url, name)
    host = build(redis, namespace, url=url,
                 settings=HostSettings(request_timeout_s=300, turn_timeout_s=200))
    outcomes: Counter[str] = Counter()
    try:
        trace_id = await prepare(host, namespace)
        # no worker runs here: hold the route lease a worker would, so the accept admits
        await AgentDirectory(admin).register(namespace, ["echo"], 3600)
        rt = request_round_trip(host, trace_id, payload_of(payload_bytes), expect="succeeded")
        base = {"rss_kb": rss_kb(), "used_memory": int((await admin.info("memory"))["used_memory"])}

        async def one() -> None:
            try:
                await rt()
            except BenchFailure as exc:
                outcomes[_outcome_key(exc)] += 1

        async with host, anyio.create_task_group() as tg:
            accept_s = await _start(tg, host, n, one, outcomes)
            early = dict(outcomes)
            if early:  # a request refused at accept waits for nothing: the numbers mean nothing
                raise BenchFailure(f"{sum(early.values())} of {n} requests were not accepted: "
                                   f"{early}")
            report = await _measure(admin, host, namespace, name, n, base)
            report.update(n=n, payload_bytes=payload_bytes, accept_s=round(accept_s, 2),
                          accept_per_s=round(n / accept_s, 1), failed_before_wait=early)
            report["cancel_s"] = round(await _cancel_all(admin, host, namespace), 2)
        report["outcomes"] = dict(outcomes)
        return report
    finally:
        await drop_namespace(admin, namespace)
        await redis.aclose()
        await admin.aclose()


async def _all_waiting(host: MessagingHost, n: int) -> bool:
    return _waiting(host) >= n
