"""The worker as a real separate process: delivery, SIGKILL mid-turn, dead letters and
the CLI, on real Redis (the arq worker) and on the local 3-primary cluster (the stream
worker). Skipped without REDIS_URL; marked slow."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from redis.asyncio import Redis

from sharedos_redis.store.client import RedisSettings, create_redis
from sharedos_redis.worker.host import MessagingHost

from ..support import wait_served
from . import proc_app
from .helpers import drop_namespace, grant, invoke_grant, put, send_grant

pytestmark = [pytest.mark.anyio, pytest.mark.slow]
ROOT = Path(__file__).resolve().parents[2]
CLI = [sys.executable, "-m", "sharedos_redis.worker.cli"]


@pytest.fixture
def url(deployment_url: str) -> str:
    """Every test on single Redis and on the local cluster."""
    return deployment_url


@pytest.fixture
def proc_ns() -> str:
    return f"p-{uuid.uuid4().hex[:10]}"


@pytest.fixture
async def client(url: str, proc_ns: str) -> AsyncIterator[Redis]:
    redis = create_redis(RedisSettings.from_url(url))  # a cluster client on the cluster
    yield redis
    await drop_namespace(redis, proc_ns)
    await redis.delete(proc_app.signals_key(proc_ns), proc_app.release_key(proc_ns))
    await redis.aclose()


def _env(url: str, ns: str, **extra: str) -> dict[str, str]:
    env = dict(os.environ, SHAREDOS_REDIS_URL=url, SHAREDOS_NAMESPACE=ns, **extra)
    env["PYTHONPATH"] = str(ROOT)
    return env


@pytest.fixture
def workers(url: str, proc_ns: str) -> Iterator[Callable[..., subprocess.Popen[bytes]]]:
    started: list[subprocess.Popen[bytes]] = []

    def start(**extra: str) -> subprocess.Popen[bytes]:
        proc = subprocess.Popen(
            [*CLI, "worker", "--app", "tests.worker.proc_app:host"], cwd=ROOT,
            env=_env(url, proc_ns, **extra), stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL)
        started.append(proc)
        return proc

    yield start
    for proc in started:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


async def _grants(host: MessagingHost, ns: str) -> None:
    await put(host, send_grant(ns, "bob", "alice"), invoke_grant(ns, "bob"),
              invoke_grant(ns, "alice"), grant(ns, "alice", "files", ("alice",), "read"),
              grant(ns, "bob", "files", ("bob",), "read"))


async def _wait_signal(client: Redis, ns: str) -> str:
    popped = await client.blpop([proc_app.signals_key(ns)], timeout=15)
    assert popped is not None, "alice's turn never started"
    return popped[1].decode()


def _cli(url: str, ns: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*CLI, *args], cwd=ROOT, env=_env(url, ns), capture_output=True,
                          text=True, timeout=30, check=False)


async def _settled_replies(host: MessagingHost, ns: str, message_id: str) -> int:
    events = await host.router.timeline(ns, message_id)
    return sum(1 for event in events if event.type == "reply.settled")


@pytest.mark.parametrize("direct", ["1", "0"], ids=["direct", "via-arq-queue"])
async def test_worker_process_runs_alice_as_alice(client: Redis, url: str, proc_ns: str,
                                                  workers: Callable[..., Any], direct: str) -> None:
    if direct == "0" and RedisSettings.from_url(url).cluster:
        pytest.skip("the stream worker has no arq queue: it always starts turns directly")
    host = proc_app.build(client, proc_ns)
    await _grants(host, proc_ns)
    workers(TEST_DIRECT_DISPATCH=direct)
    await wait_served(client, proc_ns, "alice")  # the worker is up
    async with host:
        with anyio.fail_after(20):
            result = await host.start_turn("bob", {}, purpose="atlas-status")
    assert result.status == "succeeded"
    assert result.output["status"] == "succeeded", result.output["error"]  # type: ignore[index]
    reply = result.output["output"]  # type: ignore[index]
    assert reply["own"] == "succeeded" and reply["bobs"] == "denied"
    assert reply["attempt"] == 1


async def test_sigkill_mid_turn_reruns_once_and_replies_once(
        client: Redis, url: str, proc_ns: str, workers: Callable[..., Any]) -> None:
    host = proc_app.build(client, proc_ns, bob_mode="block")
    await _grants(host, proc_ns)
    first = workers()
    await wait_served(client, proc_ns, "alice")  # the worker is up
    async with host, anyio.create_task_group() as tg:
        results: list[Any] = []

        async def bob() -> None:
            results.append(await host.start_turn("bob", {}, purpose="atlas-status"))

        tg.start_soon(bob)
        with anyio.fail_after(20):
            assert await _wait_signal(client, proc_ns) == "started:1"
            pending = _cli(url, proc_ns, "pending", "--json")
            assert pending.returncode == 0, pending.stderr
            rows = json.loads(pending.stdout)
            assert [(r["state"], r["recipient"]) for r in rows] == [("running", "agent:alice")]
            first.send_signal(signal.SIGKILL)
            first.wait()
            workers()  # a second worker re-runs the turn once the lease expires
    assert len(results) == 1 and results[0].status == "succeeded"
    reply = results[0].output["output"]
    assert reply["attempt"] == 2
    assert await _settled_replies(host, proc_ns, reply["message_id"]) == 1
    show = _cli(url, proc_ns, "show", reply["message_id"])
    assert show.returncode == 0 and "reply.settled" in show.stdout and "turn.started" in show.stdout


async def test_sigkill_past_max_attempts_dead_letters(
        client: Redis, url: str, proc_ns: str, workers: Callable[..., Any]) -> None:
    host = proc_app.build(client, proc_ns, bob_mode="block", max_attempts=1)
    await _grants(host, proc_ns)
    first = workers(TEST_MAX_ATTEMPTS="1")
    await wait_served(client, proc_ns, "alice")  # the worker is up
    async with host, anyio.create_task_group() as tg:
        results: list[Any] = []

        async def bob() -> None:
            results.append(await host.start_turn("bob", {}, purpose="atlas-status"))

        tg.start_soon(bob)
        with anyio.fail_after(20):
            await _wait_signal(client, proc_ns)
            first.send_signal(signal.SIGKILL)
            first.wait()
            workers(TEST_MAX_ATTEMPTS="1")
    failed = results[0].output
    assert failed["status"] == "failed"
    assert failed["error"]["details"] == {"outcome": "request_dead_lettered"}
    listed = _cli(url, proc_ns, "dead-letters", "--json")
    assert listed.returncode == 0, listed.stderr
    assert len(json.loads(listed.stdout)) == 1


def test_cli_one_line_errors(url: str, proc_ns: str) -> None:
    unknown = _cli(url, proc_ns, "show", "no-such-id")
    assert unknown.returncode == 1 and "Traceback" not in unknown.stderr
    assert len(unknown.stderr.strip().splitlines()) == 1
    down = _cli("redis://127.0.0.1:1/0", proc_ns, "pending")
    assert down.returncode == 1 and "Traceback" not in down.stderr
    bad = _cli("notaurl://x", proc_ns, "pending")  # a settings error is a usage error
    assert bad.returncode == 2 and "Traceback" not in bad.stderr
    assert bad.stderr.strip().splitlines() == ["error: unsupported Redis URL scheme 'notaurl'"]


async def test_cli_budget_and_pending_table(client: Redis, url: str, proc_ns: str) -> None:
    assert _cli(url, proc_ns, "budget", "get", "t-1").stdout.strip() == "unset"
    done = _cli(url, proc_ns, "budget", "set", "t-1", "5")
    assert done.returncode == 0, done.stderr
    assert _cli(url, proc_ns, "budget", "get", "t-1").stdout.strip() == "5"
    host = proc_app.build(client, proc_ns)
    batch = await host.audit.read(proc_ns)
    assert [(e.type, e.trace_id, (e.metadata or {}).get("hops")) for _, e in batch] == [
        ("budget.set", "t-1", 5)]
    table = _cli(url, proc_ns, "pending")
    assert table.returncode == 0 and table.stdout.strip() == "(none)"
    usage = _cli(url, "", "pending")
    assert usage.returncode == 2
