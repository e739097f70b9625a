"""One bob → alice → carol delegation across real worker processes is one trace.

bob's turn runs in the test process (spans in the SDK's in-memory exporter); alice's
and carol's run in ``sharedos-redis worker`` processes that export their spans to a
JSON-lines file. The trace context crosses processes only through the request
record's host-owned ``tp`` field. Real Redis only; marked slow.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
from redis.asyncio import Redis

from sharedos_redis.kernel.contracts import MessageEnvelope
from sharedos_redis.observability import names as n
from sharedos_redis.store.keys import Keys

from ..support import drop_namespace, wait_served
from ..worker.helpers import grant, invoke_grant, put, send_grant
from . import otel_app
from .conftest import Sdk
from .span_files import read_spans, span_record

pytestmark = [pytest.mark.anyio, pytest.mark.slow]
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
async def client(url: str, ns: str) -> AsyncIterator[Redis]:
    redis = Redis.from_url(url)
    yield redis
    await drop_namespace(redis, ns)
    await redis.aclose()


def _stop(procs: list[subprocess.Popen[bytes]]) -> None:
    for proc in procs:
        proc.send_signal(signal.SIGTERM)
    for proc in procs:
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _workers(url: str, ns: str, spans: Path, count: int, *args: str,
             ) -> list[subprocess.Popen[bytes]]:
    env = dict(os.environ, SHAREDOS_REDIS_URL=url, SHAREDOS_NAMESPACE=ns,
               TEST_SPANS_FILE=str(spans), PYTHONPATH=str(ROOT))
    return [subprocess.Popen(
        [sys.executable, "-m", "sharedos_redis.worker.cli", "worker", "--app",
         "tests.observability.otel_app:host", *args], cwd=ROOT, env=env,
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL) for _ in range(count)]


@pytest.fixture
def spans_file(tmp_path: Path, url: str, ns: str) -> Iterator[Path]:
    path = tmp_path / "worker-spans.jsonl"
    procs = _workers(url, ns, path, 2)
    yield path
    _stop(procs)


@pytest.fixture
def metrics_url(tmp_path: Path, url: str, ns: str) -> Iterator[str]:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = int(sock.getsockname()[1])
    procs = _workers(url, ns, tmp_path / "spans.jsonl", 1, "--metrics-port", str(port))
    yield f"http://127.0.0.1:{port}/metrics"
    _stop(procs)


async def _worker_spans(path: Path, want: int) -> list[dict[str, Any]]:
    """Wait (deadline 15 s) until the workers exported ``want`` turn spans."""
    with anyio.fail_after(15):
        while True:
            spans = read_spans(path)
            if sum(1 for s in spans if s["name"] == n.SPAN_TURN) >= want:
                return spans
            await anyio.sleep(0.05)


def _one(spans: list[dict[str, Any]], name: str, **attrs: Any) -> dict[str, Any]:
    found = [s for s in spans if s["name"] == name
             and all(s["attributes"].get(k) == v for k, v in attrs.items())]
    assert len(found) == 1, (name, attrs, [s["name"] for s in spans])
    return found[0]


async def test_bob_alice_carol_is_one_trace_across_processes(
        client: Redis, ns: str, sdk: Sdk, spans_file: Path) -> None:
    host = otel_app.build(client, ns)
    await put(host, invoke_grant(ns, "bob"), invoke_grant(ns, "alice"), invoke_grant(ns, "carol"),
              send_grant(ns, "bob", "alice"), send_grant(ns, "alice", "carol"),
              grant(ns, "carol", "files", ("carol",), "read"))
    await wait_served(client, ns, "alice", "carol")  # the workers' route leases
    async with host:
        with anyio.fail_after(30):
            result = await host.start_turn("bob", {"tick": 1}, purpose="atlas-status",
                                           trace_id=f"trace-{uuid.uuid4().hex[:8]}")
    assert result.status == "succeeded"
    assert result.output["status"] == "succeeded", result.output["error"]  # type: ignore[index]
    carol = result.output["output"]["output"]  # type: ignore[index]
    assert carol == {"answer": otel_app.SECRET_ANSWER}, carol
    local = [span_record(s) for s in sdk.spans.get_finished_spans()]
    spans = local + await _worker_spans(spans_file, want=2)
    sender = {n.SENDER: "agent:bob"}

    bob_turn = _one(spans, n.SPAN_TURN, **{n.RECIPIENT: "agent:bob"})
    bob_request = _one(spans, n.SPAN_REQUEST, **sender)
    alice_turn = _one(spans, n.SPAN_TURN, **{n.RECIPIENT: "agent:alice"})
    alice_request = _one(spans, n.SPAN_REQUEST, **{n.SENDER: "agent:alice"})
    carol_turn = _one(spans, n.SPAN_TURN, **{n.RECIPIENT: "agent:carol"})
    # one trace, nested across the three turns and the processes
    assert {s["trace_id"] for s in spans} == {bob_turn["trace_id"]}
    assert bob_turn["parent_id"] is None
    assert bob_request["parent_id"] == bob_turn["span_id"]
    assert alice_turn["parent_id"] == bob_request["span_id"]
    assert alice_request["parent_id"] == alice_turn["span_id"]
    assert carol_turn["parent_id"] == alice_request["span_id"]
    assert bob_request["pid"] == os.getpid() != alice_turn["pid"]
    assert carol_turn["pid"] != os.getpid()
    by_id = {s["span_id"]: s for s in spans}
    for span in spans:  # every span hangs off bob's root turn
        assert span["parent_id"] is None or span["parent_id"] in by_id, span["name"]
    # the rest of the path: accept, dispatch, settlement, tool calls
    for request in (bob_request, alice_request):
        accept = _one(spans, n.SPAN_ACCEPT, **{n.SENDER: request["attributes"][n.SENDER]})
        assert accept["parent_id"] == request["span_id"]
        message_id = accept["attributes"][n.MESSAGE_ID]
        assert request["attributes"][n.MESSAGE_ID] == message_id
        dispatch = _one(spans, n.SPAN_DISPATCH, **{n.MESSAGE_ID: message_id})
        assert dispatch["parent_id"] == request["span_id"]
        settle = _one(spans, n.SPAN_SETTLE, **{n.MESSAGE_ID: message_id})
        assert by_id[settle["parent_id"]]["name"] == n.SPAN_TURN
    # the attributes
    attrs = alice_turn["attributes"]
    assert attrs[n.NAMESPACE] == ns and attrs[n.SENDER] == "agent:bob"
    assert attrs[n.PURPOSE] == "atlas-status" and attrs[n.ATTEMPT] == 1
    assert attrs[n.CODE] == "replied" and attrs[n.CATALOG_HASH].startswith("sha256:")
    assert attrs[n.MESSAGE_ID] == bob_request["attributes"][n.MESSAGE_ID]
    assert bob_request["attributes"][n.CODE] == "replied"
    assert bob_request["attributes"][n.OUTCOME] == "succeeded"
    assert bob_request["attributes"][n.RECIPIENT] == "agent:alice"
    boom = _one(spans, n.SPAN_TOOL, **{n.TOOL: "files.boom"})
    assert boom["parent_id"] == carol_turn["span_id"]
    assert boom["attributes"][n.CODE] == "tool_failed"
    # no payload, argument, reply or exception text anywhere
    text = json.dumps(spans)
    for secret in (otel_app.SECRET_QUESTION, otel_app.SECRET_ANSWER, otel_app.SECRET_FAILURE,
                   "hunter2"):
        assert secret not in text
    assert all(s["events"] == 0 for s in spans)  # no record_exception


async def test_traceparent_lives_in_the_record_not_the_envelope(
        client: Redis, ns: str, sdk: Sdk, spans_file: Path) -> None:
    host = otel_app.build(client, ns)
    await put(host, invoke_grant(ns, "bob"), invoke_grant(ns, "alice"), invoke_grant(ns, "carol"),
              send_grant(ns, "bob", "alice"), send_grant(ns, "alice", "carol"))
    await wait_served(client, ns, "alice", "carol")  # the workers' route leases
    async with host:
        with anyio.fail_after(30):
            await host.start_turn("bob", {}, purpose="atlas-status")
    request = _one([span_record(s) for s in sdk.spans.get_finished_spans()], n.SPAN_REQUEST)
    message_id = request["attributes"][n.MESSAGE_ID]
    env, tp = await client.hmget(Keys(ns).message(message_id), ["env", "tp"])
    assert tp.decode().startswith(f"00-{request['trace_id']}-{request['span_id']}-")
    assert "traceparent" not in env.decode() and request["span_id"] not in env.decode()
    MessageEnvelope.from_json(env)  # still the strict SharedOS envelope


def _sample(text: str, metric: str, *labels: str) -> float:
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
               if line.partition("{")[0] == metric and all(lb in line for lb in labels))


async def test_worker_serves_prometheus_metrics(client: Redis, ns: str, sdk: Sdk,
                                                metrics_url: str) -> None:
    host = otel_app.build(client, ns)
    await put(host, invoke_grant(ns, "bob"), invoke_grant(ns, "alice"), invoke_grant(ns, "carol"),
              send_grant(ns, "bob", "alice"), send_grant(ns, "alice", "carol"),
              grant(ns, "carol", "files", ("carol",), "read"))
    await wait_served(client, ns, "alice", "carol")  # the workers' route leases
    async with host:
        with anyio.fail_after(30):
            result = await host.start_turn("bob", {}, purpose="atlas-status")
    assert result.output["status"] == "succeeded"  # type: ignore[index]
    mine = f'sharedos_namespace="{ns}"'
    with anyio.fail_after(15):
        async with httpx.AsyncClient() as http:
            while True:  # alice's turn span ends just after bob has his reply
                text = (await http.get(metrics_url)).text
                if _sample(text, "sharedos_turn_duration_seconds_count", mine) >= 2:
                    break
                await anyio.sleep(0.05)
    # alice's and carol's turns ran in the worker; alice's request to carol too
    assert _sample(text, "sharedos_turn_duration_seconds_count", mine,
                   'sharedos_code="replied"') == 2
    assert _sample(text, "sharedos_requests_total", mine, 'sharedos_code="replied"') == 1
    assert _sample(text, "sharedos_relay_lag_seconds_count", mine) >= 1
    assert _sample(text, "sharedos_tool_calls_total", mine, 'sharedos_tool="files.carol"') == 1
    # gauges read from Redis at scrape time: this worker's relay, nothing left open
    assert _sample(text, "sharedos_workers", mine) == 1
    pending = [line for line in text.splitlines()
               if line.startswith("sharedos_pending{") and mine in line]
    assert len(pending) == 3 and _sample(text, "sharedos_pending", mine) == 0
    assert _sample(text, "sharedos_dead_letters", mine) == 0
