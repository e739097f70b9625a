"""A live worker whose runtime blocks its event loop past ``lease_s`` (issue 12 done-when):
with real Redis and two real ``sharedos-redis worker`` processes, the reconciler hands
the turn to the other worker (attempt 2); when the stale attempt 1 wakes up its
settlement is refused ``turn_lease_lost`` (audited), the requester gets exactly one
reply (attempt 2's), and the payment tool's side effect happens once: both attempts ran
the handler, which deduplicated on the call's idempotency key (the same in every
attempt). A stale attempt that delegates after waking up never gets its nested request
accepted (the accept script is fenced too). On a private server (arq worker) and on the
local cluster (stream worker)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import anyio
import pytest
from redis.asyncio import Redis

from sharedos_redis.kernel.contracts import CapabilityGrant
from sharedos_redis.store.audit import RedisAuditSink
from sharedos_redis.store.keys import Keys
from sharedos_redis.transport.turn_scope import child_id
from sharedos_redis.worker.host import MessagingHost

from ..support import eventually, wait_served
from . import proc_app
from .conftest import Target
from .helpers import grant, invoke_grant, put, send_grant
from .test_deployment import Worker

pytestmark = [pytest.mark.anyio, pytest.mark.slow]


@pytest.fixture
def two_workers(tmp_path: Path, target: Target) -> Iterator[Callable[[str], list[Worker]]]:
    started: list[Worker] = []

    def start(ns: str) -> list[Worker]:
        started.extend(Worker(target.url, ns, tmp_path / f"worker-{i}.log") for i in range(2))
        return started

    yield start
    for worker in started:
        worker.stop()


async def _stall(host: MessagingHost, client: Redis, workers: list[Worker]) -> tuple[str, str]:
    """bob asks alice, whose attempt 1 blocks its worker's loop; attempt 2 (the other
    worker) replies; then attempt 1 is released. Returns alice's request id and the
    stale attempt's turn log line."""
    ns = host.namespace
    await wait_served(host.redis, ns, "alice", "bob")  # the workers are up
    async with host:
        async with anyio.create_task_group() as tg:
            results: list[object] = []

            async def ask() -> None:
                with anyio.fail_after(30):
                    results.append(await host.start_turn("bob", {}, purpose="atlas-status"))

            tg.start_soon(ask)
            popped = await client.blpop([proc_app.signals_key(ns)], timeout=20)
            assert popped == (proc_app.signals_key(ns).encode(), b"started:1")
        # attempt 1's worker is still blocked: the reply is attempt 2's, from the other one
        [result] = results
        assert result.status == "succeeded", result  # type: ignore[attr-defined]
        output = result.output  # type: ignore[attr-defined]
        assert output["status"] == "succeeded" and output["output"]["attempt"] == 2, output
        request_id: str = output["output"]["message_id"]
        await client.lpush(proc_app.release_key(ns), "go")  # attempt 1 wakes up

        def stale_lines() -> list[str]:
            return [line for worker in workers for line in worker.turn_lines()
                    if "attempt=1 " in line]

        async def stale_ended() -> bool:
            return bool(stale_lines())

        await eventually(stale_ended, timeout_s=20)
    # exactly one reply: one settlement of alice's request, by attempt 2
    settled = [fields for _, fields in await client.xrange(Keys(ns).settled)
               if fields[b"id"].decode() == request_id]
    assert settled == [{b"id": request_id.encode(), b"state": b"replied"}]
    assert await client.hget(Keys(ns).message(request_id), "attempts") == b"2"
    # the payment ran in both attempts under one key; its side effect happened once
    assert await client.hgetall(proc_app.payments_key(ns)) == {b"runs": b"2", b"paid": b"1"}
    for worker in workers:
        assert "Traceback" not in worker.text(), worker.text()
    return request_id, stale_lines()[0]


async def test_a_blocked_live_attempt_is_fenced_and_the_effect_happens_once(
        target: Target, app_client: Redis,
        two_workers: Callable[[str], list[Worker]]) -> None:
    [ns] = target.namespaces(1)
    host = proc_app.build(app_client, ns, url=target.url, bob_mode="stall", lease_s=1,
                          request_timeout_s=20, turn_timeout_s=15)
    await put(host, *_grants(ns))
    workers = two_workers(ns)
    request_id, stale = await _stall(host, app_client, workers)
    assert "outcome=turn_lease_lost" in stale, stale
    audit = [event for _, event in await RedisAuditSink(app_client).read(ns)]
    [refused] = [e for e in audit if e.type == "reply.refused"]
    assert (refused.reason, refused.cause, refused.message_id) == (
        "turn_lease_lost", "attempt", request_id)
    assert refused.metadata == {"attempt": 1, "currentAttempt": 2}
    # each attempt ran as its own turn: two turn ids, in the audit and the turn log lines
    turn_ids = {e.metadata["turnId"] for e in audit
                if e.type == "turn.admitted" and e.receiver is not None
                and e.receiver.id == "alice" and e.metadata}
    logged = {line.rsplit("turn_id=", 1)[1] for worker in workers
              for line in worker.turn_lines() if "agent=alice" in line}
    assert len(turn_ids) == 2 and logged == turn_ids  # the log line names the audit's turn


async def test_a_blocked_live_attempts_nested_request_is_never_accepted(
        target: Target, app_client: Redis,
        two_workers: Callable[[str], list[Worker]]) -> None:
    [ns] = target.namespaces(1)
    host = proc_app.build(app_client, ns, url=target.url, bob_mode="stall-ask", lease_s=1,
                          request_timeout_s=20, turn_timeout_s=15)
    await put(host, *_grants(ns), send_grant(ns, "alice", "bob"))
    request_id, stale = await _stall(host, app_client, two_workers(ns))
    # stopped by its renewal, or refused at the accept and then at the settle: either
    # way the stale attempt's nested request was not accepted (no record, no hop)
    assert "outcome=lease_lost" in stale or "outcome=turn_lease_lost" in stale, stale
    nested = child_id(request_id, 1)
    assert not await app_client.exists(Keys(ns).message(nested))
    audit = [event for _, event in await RedisAuditSink(app_client).read(ns)]
    assert not [e for e in audit if e.type == "message.accepted" and e.message_id == nested]
    refusals = [e.reason for e in audit if e.message_id == nested and e.outcome == "denied"]
    assert set(refusals) <= {"turn_lease_lost"}, refusals
    print(f"stale attempt: {stale.split('outcome=')[1].split()[0]}; "
          f"nested accept refusals audited: {refusals}")


def _grants(ns: str) -> list[CapabilityGrant]:
    return [send_grant(ns, "bob", "alice"), invoke_grant(ns, "bob"), invoke_grant(ns, "alice"),
            grant(ns, "alice", "files", ("alice",), "read"),
            grant(ns, "alice", "notes", ("alice",), "write")]
