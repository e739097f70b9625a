"""``python -m bench.scaling [--quick]``: the full path on a 1-node and a 3-node Redis
Cluster, same load, one run; Redis CPU per node.

Each deployment is a private local cluster (``tests.servers.cluster.LocalCluster``,
loopback ports, stopped at the end): 3 namespaces (on the 3-node cluster, one per
primary), one ``sharedos-redis worker`` process per namespace (the stream worker, as
on any cluster URL). Latency: sequential round trips over the namespaces in turn;
throughput: 48 concurrent requesters (16 per namespace) in this one process. Redis
CPU: ``used_cpu_user + used_cpu_sys`` per node over the concurrent phase, per round trip.
"""

from __future__ import annotations

import argparse
import itertools
import json
import sys
import time
from contextlib import ExitStack
from typing import Any

import anyio
from redis import Redis as SyncRedis

from sharedos_redis.store.client import RedisSettings, create_redis
from sharedos_redis.store.keys import Keys
from tests.servers.cluster import LocalCluster, namespaces_on_distinct_nodes

from .app import build
from .full_path import prepare, request_round_trip
from .procs import RESULTS, running, stop_all
from .stats import RoundTrip, measure
from .waiters import payload_of

__all__ = ["main"]

_CLI = ["-m", "sharedos_redis.worker.cli", "worker", "--app", "bench.app:host"]


def _cpu(cluster: LocalCluster) -> dict[int, float]:
    seconds = {}
    for node in cluster.nodes:
        client: SyncRedis = node.client()
        try:
            info = client.info("cpu")
            seconds[node.port] = float(info["used_cpu_user"]) + float(info["used_cpu_sys"])
        finally:
            client.close()
    return seconds


async def _deployment(primaries: int, sizes: dict[str, int]) -> dict[str, Any]:
    cluster = LocalCluster(primaries=primaries).start()
    try:
        url = cluster.url
        namespaces = namespaces_on_distinct_nodes(cluster, 3, f"scale{primaries}") \
            if primaries >= 3 else [f"scale{primaries}-{i}" for i in range(3)]
        redis = create_redis(RedisSettings.from_url(url, max_connections=64))
        hosts = [build(redis, ns, url=url) for ns in namespaces]
        with ExitStack() as workers:
            for i, ns in enumerate(namespaces):
                workers.enter_context(running(_CLI, {"SHAREDOS_REDIS_URL": url,
                                                     "SHAREDOS_NAMESPACE": ns},
                                              f"scaling-{primaries}-worker-{i}"))
            async with hosts[0], hosts[1], hosts[2]:
                trips = [request_round_trip(h, await prepare(h, ns), payload_of(200))
                         for h, ns in zip(hosts, namespaces, strict=True)]
                with anyio.fail_after(60):
                    for trip in trips:
                        await trip()  # the workers are up
                cycle = itertools.cycle(trips)

                async def round_robin() -> None:
                    await next(cycle)()

                rt: RoundTrip = round_robin
                before = _cpu(cluster)
                result = await measure(f"{primaries}-node", rt, warmup=sizes["warmup"],
                                       n=sizes["sequential"], total=sizes["concurrent"],
                                       concurrency=48)
                after = _cpu(cluster)
        await redis.aclose()
        total_rt = result.sequential + result.concurrent + sizes["warmup"]
        cpu_ms = {str(port): round((after[port] - before[port]) * 1000 / total_rt, 3)
                  for port in after}
        owners = {ns: cluster.owner(Keys(ns).outbox) for ns in namespaces}
        return {"primaries": primaries, "measurement": result.to_json(),
                "redis_cpu_ms_per_rt_by_node": cpu_ms, "namespace_nodes": owners}
    finally:
        cluster.stop()


def _render(rows: list[dict[str, Any]]) -> str:
    lines = ["| deployment | p50 ms | p90 ms | p99 ms | rt/s (48 concurrent) "
             "| Redis CPU ms per rt, by node |", "|---|---|---|---|---|---|"]
    for row in rows:
        m = row["measurement"]
        cpu = " / ".join(f"{v:.2f}" for v in row["redis_cpu_ms_per_rt_by_node"].values())
        lines.append(f"| {row['primaries']}-node cluster | {m['p50_ms']:.2f} | "
                     f"{m['p90_ms']:.2f} | {m['p99_ms']:.2f} | {m['rt_per_s']:,.0f} | {cpu} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """Run both deployments, print the table, write ``bench/results/scaling.json``."""
    parser = argparse.ArgumentParser(prog="python -m bench.scaling", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="fewer round trips (< 60 s)")
    args = parser.parse_args(argv)
    sizes = ({"warmup": 20, "sequential": 150, "concurrent": 480} if args.quick
             else {"warmup": 50, "sequential": 600, "concurrent": 2400})
    try:
        rows = [anyio.run(_deployment, n, sizes) for n in (1, 3)]
    finally:
        stop_all()
    RESULTS.mkdir(parents=True, exist_ok=True)
    with open(RESULTS / "scaling.json", "w", encoding="utf-8") as out:
        json.dump({"sizes": sizes, "rows": rows, "at": time.time()}, out, indent=2)
    print(_render(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
