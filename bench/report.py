"""The printed table, ratios and target verdicts of one run (no I/O but ``print``)."""

from __future__ import annotations

from typing import Any

__all__ = ["ratios", "render", "targets"]


def ratios(rows: dict[str, dict[str, Any]]) -> dict[str, float]:
    """ours/floor and ours/arq for p50 latency and throughput (same run)."""
    ours, floor, arq = rows.get("full"), rows.get("floor"), rows.get("arq")
    out: dict[str, float] = {}
    if ours and floor:
        out["p50_ours_over_floor"] = round(ours["p50_ms"] / floor["p50_ms"], 2)
        out["rt_per_s_ours_over_floor"] = round(ours["rt_per_s"] / floor["rt_per_s"], 3)
    otel = rows.get("full_otel")
    if ours and otel:  # tracing and metrics on over off, same run
        out["p50_otel_on_over_off"] = round(otel["p50_ms"] / ours["p50_ms"], 2)
        out["p99_otel_on_over_off"] = round(otel["p99_ms"] / ours["p99_ms"], 2)
        out["rt_per_s_otel_on_over_off"] = round(otel["rt_per_s"] / ours["rt_per_s"], 3)
    fake, fake_otel = rows.get("fake"), rows.get("fake_otel")
    if fake and fake_otel:  # the same in one process on fakeredis: CPU cost only
        out["p50_fake_otel_on_over_off"] = round(fake_otel["p50_ms"] / fake["p50_ms"], 2)
        out["rt_per_s_fake_otel_on_over_off"] = round(
            fake_otel["rt_per_s"] / fake["rt_per_s"], 3)
    if ours and arq:
        out["p50_ours_over_arq"] = round(ours["p50_ms"] / arq["p50_ms"], 2)
        out["p99_ours_over_arq"] = round(ours["p99_ms"] / arq["p99_ms"], 2)
        out["rt_per_s_ours_over_arq"] = round(ours["rt_per_s"] / arq["rt_per_s"], 3)
    return out


def _verdict(ok: bool | None) -> str:
    return "n/a" if ok is None else "MET" if ok else "MISSED"


def targets(report: dict[str, Any]) -> list[dict[str, Any]]:
    """The issues' targets, each with the measured value and MET/MISSED."""
    r, waiters = report["ratios"], report.get("waiters") or {}
    p50 = r.get("p50_ours_over_arq")
    tput = r.get("rt_per_s_ours_over_arq")
    conns = waiters.get("connections")
    mem = waiters.get("redis_bytes_per_request_total")
    full_cost = report.get("cost", {}).get("full", {})
    commands, cpu = full_cost.get("per_rt"), full_cost.get("cpu_ms_per_rt")
    floor = r.get("p50_ours_over_floor")
    accepts = waiters.get("accept_per_s")
    return [
        {"target": "<= 20 Redis commands per request/reply", "value": commands,
         "verdict": _verdict(None if commands is None else commands <= 20)},
        {"target": "throughput >= 1.1x bare arq (one worker process)", "value": tput,
         "verdict": _verdict(None if tput is None else tput >= 1.1)},
        {"target": "p50 <= 3x the raw-Streams floor", "value": floor,
         "verdict": _verdict(None if floor is None else floor <= 3)},
        {"target": "Redis CPU per round trip <= 0.3 ms (INFO cpu)", "value": cpu,
         "verdict": _verdict(None if cpu is None else cpu <= 0.3)},
        {"target": f"{waiters.get('n', '?')}-request burst accepted at >= 2,000/s",
         "value": accepts, "verdict": _verdict(None if accepts is None else accepts >= 2000)},
        {"target": "full-path p50 <= bare arq p50 (same poll_delay)", "value": p50,
         "verdict": _verdict(None if p50 is None else p50 <= 1.0)},
        {"target": "50-requester throughput >= 70% of bare arq", "value": tput,
         "verdict": _verdict(None if tput is None else tput >= 0.70)},
        {"target": f"{waiters.get('n', '?')} waiters on a handful of connections",
         "value": conns, "verdict": _verdict(None if conns is None else conns <= 20)},
        {"target": "<= 2 KB Redis memory per pending request (200-byte payload)",
         "value": mem, "verdict": _verdict(None if mem is None else mem <= 2048)},
    ]


def _row(label: str, m: dict[str, Any]) -> str:
    return (f"{label:<34} {m['sequential']:>6} {m['p50_ms']:>8.2f} {m['p90_ms']:>8.2f} "
            f"{m['p99_ms']:>8.2f} {m['concurrency']:>5} {m['rt_per_s']:>9.0f}")


_LABELS = {"floor": "floor: streams request/reply", "arq": "bare arq (worker process)",
           "full": "sharedos-redis (worker process)",
           "fake": "sharedos-redis (fakeredis, local)",
           "full_otel": "sharedos-redis, OpenTelemetry on",
           "fake_otel": "fakeredis, local, OpenTelemetry on"}


def _waiters(w: dict[str, Any]) -> list[str]:
    return [
        f"waiters: {w['n']} requests, {w['waiting']} waiting at once, "
        f"accepted in {w['accept_s']} s ({w['accept_per_s']:.0f}/s), "
        f"cancelled in {w['cancel_s']} s; outcomes {w['outcomes']}",
        f"  connections {w['connections']} ({w['blocked_connections']} blocked in XREAD); "
        f"RSS {w['rss_kb'] / 1024:.0f} MiB (+{w['rss_delta_kb'] / 1024:.0f} MiB)",
        f"  Redis bytes/pending request {w['redis_bytes_per_request_total']:.0f} "
        f"({w['redis_bytes_per_request_without_audit']:.0f} without audit): "
        f"{w['redis_bytes_per_request']}; used_memory delta "
        f"{w['used_memory_delta_per_request']:.0f} B",
    ]


def _scale(workers: dict[str, Any], held: dict[str, Any]) -> list[str]:
    lines = []
    if workers:
        lines.append("worker processes: " + ", ".join(
            f"{w['workers']} -> {w['rt_per_s']:.0f} rt/s" for w in workers.values())
            + f" ({next(iter(workers.values()))['concurrency']} requesters)")
    if held:
        lines.append(f"sustained {held['seconds']:g}s, {held['concurrency']} requesters: "
                     f"p50 {held['p50_ms']} ms, p99 {held['p99_ms']} ms, "
                     f"{held['rt_per_s']:.0f} rt/s; per {held['window_s']:g}s window "
                     "(p50/p99 ms): " + " ".join(
                         f"{w['p50_ms']}/{w['p99_ms']}" for w in held["windows"]))
    return lines


def render(report: dict[str, Any]) -> str:
    """The human-readable report."""
    lines = [f"{'path':<34} {'n':>6} {'p50 ms':>8} {'p90 ms':>8} {'p99 ms':>8} "
             f"{'conc':>5} {'rt/s':>9}"]
    rows = report["measurements"]
    lines += [_row(_LABELS[key], rows[key]) for key in _LABELS if key in rows]
    lines.append("ratios: " + ", ".join(f"{k}={v}" for k, v in report["ratios"].items()))
    for key, cost in report.get("cost", {}).items():
        top = ", ".join(f"{name} {v}" for name, v in list(cost["by_command"].items())[:8])
        lines.append(f"commands/rt {key}: {cost['per_rt']} idle-adjusted "
                     f"({cost['total_per_rt']} raw; idle {cost['idle_per_s']}/s) — {top}")
        lines.append(f"  Redis CPU/rt {key}: {cost['cpu_ms_per_rt']} ms (INFO cpu); "
                     f"commandstats {cost['usec_per_rt_no_scripts']}-{cost['usec_per_rt']} us")
    w = report.get("waiters")
    if w:
        lines += _waiters(w)
    lines += _scale(report.get("workers") or {}, report.get("sustained") or {})
    lines += [f"target: {t['target']}: {t['value']} -> {t['verdict']}" for t in report["targets"]]
    lines.append("timings: " + ", ".join(f"{k} {v:.1f}s" for k, v in report["timings"].items()))
    return "\n".join(lines)
