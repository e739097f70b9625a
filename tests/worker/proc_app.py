"""A host for worker processes started by tests: ``--app tests.worker.proc_app:host``.

Configured by environment: SHAREDOS_REDIS_URL, SHAREDOS_NAMESPACE, TEST_MAX_ATTEMPTS.
alice's behaviour is chosen by the request payload's ``mode``:
``"reply"`` answers at once; ``"block"`` signals that attempt N started (LPUSH on
``signals_key``) and then blocks on ``release_key`` (BLPOP) — except from attempt 2
on, when it answers at once; ``"write-block"`` first calls the non-repeatable
``notes.write`` tool, then does what ``"block"`` does; ``"slow"`` signals, then takes
``seconds`` (the agent's own work, e.g. a 3 s turn for drain tests); ``"stall"`` pays
once (``notes.pay``, deduplicated on its idempotency key) and then, in attempt 1 only,
signals and blocks the event loop itself (a synchronous BLPOP on ``release_key``, like
a runtime calling blocking code) before it answers; ``"stall-ask"`` does the same but
then asks bob (a nested request) before it answers. TEST_DRAIN_GRACE
sets ``drain_grace_s``, TEST_ROUTE_LEASE_S ``route_lease_s``, TEST_POLL_DELAY arq's
``poll_delay_s``; TEST_LOSE_CANCEL=1 loses the cancellation of arq's poll loop while
it sends a poll (see ``_lose_poll_cancellations``); TEST_AGENTS (comma-separated)
limits the agents the host runs (a worker serving only some of them). Signals go through
Redis lists so tests synchronise on BLPOP, never on sleeps.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from typing import Any

import anyio
import redis as sync_redis
from redis.asyncio import Redis

from sharedos_redis.kernel.contracts import AccessContext, JsonValue, ToolCall
from sharedos_redis.kernel.scripted import ScriptedRuntime
from sharedos_redis.kernel.turn import RuntimeHost, TurnRequest
from sharedos_redis.store.client import RedisSettings, create_redis
from sharedos_redis.store.connection import _QuickPath
from sharedos_redis.worker import current_call
from sharedos_redis.worker.host import AgentSpec, MessagingHost
from sharedos_redis.worker.settings import HostSettings

from .helpers import OWNER, ask, read_file_handler, tool


def signals_key(ns: str) -> str:
    return f"test:{ns}:signals"


def release_key(ns: str) -> str:
    return f"test:{ns}:release"


def payments_key(ns: str) -> str:
    """A hash: ``runs`` (handler runs), ``paid`` (side effects after deduplication)."""
    return f"test:{ns}:payments"


def _block_until_released(ns: str) -> None:
    """Block this process's event loop until the test releases it (at most 60 s)."""
    url = os.environ["SHAREDOS_REDIS_URL"]
    client: sync_redis.Redis | sync_redis.RedisCluster
    if url.startswith("redis+cluster://"):  # any one node reaches the whole cluster
        client = sync_redis.RedisCluster.from_url(
            "redis://" + url.removeprefix("redis+cluster://").split(",")[0])
    else:
        client = sync_redis.Redis.from_url(url)
    try:
        client.blpop([release_key(ns)], timeout=60)
    finally:
        client.close()


def build(redis: Redis, ns: str, *, url: str | None = None,
          connection: RedisSettings | None = None, max_attempts: int = 3,
          bob_mode: str = "reply", bob_payload: JsonValue = None,
          only: tuple[str, ...] | None = None, **settings: Any) -> MessagingHost:
    async def alice(turn: TurnRequest, host: RuntimeHost) -> JsonValue:
        payload = turn.message.payload if isinstance(turn.message.payload, dict) else {}
        own = await host.call("files.alice", {})
        bobs = await host.call("files.bob", {})
        answer = {"attempt": turn.attempt, "own": own.status, "bobs": bobs.status,
                  "message_id": turn.message.id}
        mode = payload.get("mode")
        if mode == "write-block":
            answer["wrote"] = (await host.call("notes.write", {})).status
        if mode in ("block", "write-block") and turn.attempt == 1:
            await redis.lpush(signals_key(ns), f"started:{turn.attempt}")
            await redis.blpop([release_key(ns)], timeout=0)
        if mode in ("stall", "stall-ask"):
            answer["paid"] = (await host.call("notes.pay", {})).status
            if turn.attempt == 1:
                await redis.lpush(signals_key(ns), f"started:{turn.attempt}")
                _block_until_released(ns)  # "stall": no await after this, it settles at once
                if mode == "stall-ask":  # the stale attempt delegates: a nested request
                    await host.call("messages.request", {
                        "recipient": {"kind": "agent", "agentId": "bob"}, "payload": {}})
        if mode == "slow":
            await redis.lpush(signals_key(ns), f"started:{turn.attempt}")
            await anyio.sleep(float(payload.get("seconds", 3)))
        return answer

    values: dict[str, Any] = {"request_timeout_s": 20, "turn_timeout_s": 15, "lease_s": 1,
                              "reconcile_interval_s": 0.2, "max_attempts": max_attempts,
                              "claim_idle_s": 1}
    values.update(settings)
    agents = {
        "bob": AgentSpec(ScriptedRuntime(ask("alice", bob_payload or {"mode": bob_mode})),
                         authority=OWNER, owner=OWNER, tool_namespaces=("messages", "files")),
        "alice": AgentSpec(ScriptedRuntime(alice), authority=OWNER, owner=OWNER,
                           tool_namespaces=("messages", "files", "notes")),
    }
    if only is not None:
        agents = {name: spec for name, spec in agents.items() if name in only}
    host = MessagingHost(redis, namespace=ns, agents=agents, settings=HostSettings(**values),
                         connection=connection or (RedisSettings.from_url(url) if url else None))
    host.register_tool(tool("files.alice", "files", ("alice",)), read_file_handler)
    host.register_tool(tool("files.bob", "files", ("bob",)), read_file_handler)
    write = tool("notes.write", "notes", ("alice",), action="write").model_copy(
        update={"read_write": "write"})
    host.register_tool(write, read_file_handler)

    async def pay(context: AccessContext, call: ToolCall) -> JsonValue:
        scope = current_call()
        assert scope is not None
        await redis.hincrby(payments_key(ns), "runs", 1)
        if await redis.set(f"test:{ns}:paid:{scope.idempotency_key}", scope.attempt or 0,
                           nx=True):
            await redis.hincrby(payments_key(ns), "paid", 1)
        return {"key": scope.idempotency_key}

    host.register_tool(write.model_copy(update={"name": "notes.pay"}), pay)
    return host


def _lose_poll_cancellations() -> None:
    """A task cancelled while it sends arq's poll (ZRANGEBYSCORE) runs on as if never
    cancelled: what Python 3.11's ``asyncio.wait_for`` around redis-py's write does
    when the cancellation lands just as the write ends, but every time, in a 50 ms
    window instead of a loop iteration or two."""
    send = _QuickPath.send_packed_command

    async def send_packed_command(self: Any, command: Any, check_health: bool = True) -> None:
        await send(self, command, check_health)
        packed = command if isinstance(command, bytes | str) else b"".join(command)
        if "ZRANGEBYSCORE" in str(packed[:40]):
            with contextlib.suppress(asyncio.CancelledError):
                await asyncio.sleep(0.05)

    _QuickPath.send_packed_command = send_packed_command  # type: ignore[method-assign]


def host() -> MessagingHost:
    if os.environ.get("TEST_LOSE_CANCEL") == "1":
        _lose_poll_cancellations()
    connection = RedisSettings.from_env()  # SHAREDOS_REDIS_URL, TLS files, ...
    return build(create_redis(connection), os.environ["SHAREDOS_NAMESPACE"],
                 connection=connection,
                 max_attempts=int(os.environ.get("TEST_MAX_ATTEMPTS", "3")),
                 direct_dispatch=os.environ.get("TEST_DIRECT_DISPATCH", "1") == "1",
                 drain_grace_s=float(os.environ.get("TEST_DRAIN_GRACE", "10")),
                 route_lease_s=float(os.environ.get("TEST_ROUTE_LEASE_S", "30")),
                 poll_delay_s=float(os.environ.get("TEST_POLL_DELAY", "0.005")),
                 only=tuple(os.environ["TEST_AGENTS"].split(","))
                 if os.environ.get("TEST_AGENTS") else None)
