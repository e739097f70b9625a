"""Redis commands per round trip, from ``INFO commandstats`` deltas.

Commandstats is server-wide: it counts the worker's idle polling (arq's queue poll
every 5 ms, the relay's and listener's blocking reads, the reconciler) and any
other client of the server. So the busy window (N sequential round trips) is
bracketed by two idle windows of the same setup, and the idle rate times busy time is
subtracted per command. Commands a Lua script runs are counted under their own
names as well as the ``evalsha`` that ran them.

Redis CPU per round trip, idle-adjusted the same way: ``usec_per_rt`` sums the
commandstats ``usec`` (execution time) of every command; a script's time already
includes the commands it ran, which are counted again under their own names, so this
is an upper bound, and ``usec_per_rt_no_scripts`` (without the ``evalsha`` time) a
lower bound. ``cpu_ms_per_rt`` is the server process's user + system CPU from
``INFO cpu``: execution plus reading, parsing and answering the traffic.
"""

from __future__ import annotations

import time
from collections import Counter
from typing import Any

import anyio
from redis.asyncio import Redis

from .stats import RoundTrip

__all__ = ["command_cost"]

_SELF = {"info"}  # our own snapshots
_SCRIPTS = {"evalsha", "eval", "evalsha_ro", "eval_ro", "fcall", "fcall_ro"}
_USEC = "usec:"  # counter names of commandstats time (microseconds) per command
_CPU = "cpu:us"  # the server's user + system CPU, microseconds


async def _snapshot(admin: Redis) -> Counter[str]:
    """Calls per command, ``usec:<command>`` times and the server's ``cpu:us``."""
    raw: dict[str, Any] = await admin.info("commandstats")
    cpu: dict[str, Any] = await admin.info("cpu")
    counts: Counter[str] = Counter()
    for key, value in raw.items():
        name = str(key).removeprefix("cmdstat_").lower()
        if name not in _SELF and isinstance(value, dict):
            counts[name] = int(value.get("calls", 0))
            counts[_USEC + name] = int(value.get("usec", 0))
    counts[_CPU] = int((float(cpu["used_cpu_sys"]) + float(cpu["used_cpu_user"])) * 1e6)
    return counts


async def _idle_window(admin: Redis, seconds: float) -> tuple[Counter[str], float]:
    before, start = await _snapshot(admin), time.perf_counter()
    await anyio.sleep(seconds)
    after = await _snapshot(admin)
    return after - before, time.perf_counter() - start


async def _busy_window(admin: Redis, rt: RoundTrip, n: int) -> tuple[Counter[str], float]:
    before, start = await _snapshot(admin), time.perf_counter()
    for _ in range(n):
        await rt()
    after = await _snapshot(admin)
    return after - before, time.perf_counter() - start


def _per_request(busy: Counter[str], busy_s: float, idle: Counter[str], idle_s: float,
                 n: int) -> dict[str, float]:
    adjusted: dict[str, float] = {}
    for name in set(busy) | set(idle):
        value = (busy[name] - idle[name] / idle_s * busy_s) / n
        if abs(value) >= 0.05:
            adjusted[name] = round(value, 2)
    return dict(sorted(adjusted.items(), key=lambda item: -item[1]))


async def command_cost(admin: Redis, rt: RoundTrip, *, n: int, idle_s: float
                       ) -> dict[str, Any]:
    """Commands per round trip over ``n`` sequential round trips (see the module doc).

    Returns:
        ``total_per_rt`` (all commands in the busy window / n), ``idle_per_s`` (the
        background rate), ``per_rt`` (idle-adjusted) and ``by_command`` (adjusted).
    """
    idle_a, idle_a_s = await _idle_window(admin, idle_s / 2)
    busy, busy_s = await _busy_window(admin, rt, n)
    idle_b, idle_b_s = await _idle_window(admin, idle_s / 2)
    idle, idle_total_s = idle_a + idle_b, idle_a_s + idle_b_s
    timing = {name for name in set(busy) | set(idle) if name.startswith(_USEC) or name == _CPU}
    adjusted = _per_request(busy, busy_s, idle, idle_total_s, n)
    by_command = {name: v for name, v in adjusted.items() if name not in timing}
    calls = Counter({k: v for k, v in busy.items() if k not in timing})
    idle_calls = Counter({k: v for k, v in idle.items() if k not in timing})
    idle_rate = sum(idle_calls.values()) / idle_total_s
    usec = {name.removeprefix(_USEC): v for name, v in adjusted.items()
            if name.startswith(_USEC)}
    return {
        "n": n,
        "total_per_rt": round(sum(calls.values()) / n, 2),
        "idle_per_s": round(idle_rate, 1),
        "per_rt": round((sum(calls.values()) - idle_rate * busy_s) / n, 2),
        "evalsha_per_rt": by_command.get("evalsha", 0.0),
        "by_command": by_command,
        "usec_per_rt": round(sum(usec.values()), 1),
        "usec_per_rt_no_scripts": round(sum(v for k, v in usec.items() if k not in _SCRIPTS), 1),
        "cpu_ms_per_rt": round(adjusted.get(_CPU, 0.0) / 1000, 3),
        "usec_by_command": usec,
    }
