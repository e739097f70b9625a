"""Adversarial ``messages.request`` arguments through ``Kernel.invoke_tool``.

Every input is either refused at the wire boundary (``ToolCall.from_wire`` raises
the typed ``ContractError`` before the kernel runs), succeeds with the recipient's
echo of exactly the payload sent, or returns a typed denied/failed ToolResult
whose code is in the closed vocabulary. A refused input writes nothing but audit
records: no marker, no outbox entry, no budget, no open index entry.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from typing import Any

import anyio
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from redis.asyncio import Redis

from sharedos_redis.errors import ContractError
from sharedos_redis.kernel.contracts import ToolCall, format_timestamp
from sharedos_redis.kernel.reasons import REASON_CODES
from sharedos_redis.store.keys import Keys
from sharedos_redis.worker.host import MessagingHost
from sharedos_redis.worker.local import LocalWorker
from tests.worker.helpers import drop_namespace

from . import fault_app
from .inspect_ns import keyspace
from .requester import ask

pytestmark = pytest.mark.anyio

ALICE = {"kind": "agent", "agentId": "alice"}
ODD = st.sampled_from([
    "", " ", "\x00", "a\x00b", "\ud800", "\udfff", "x\udc80y", "\u202e", "\ufeff", "\U0010ffff",
    "a}", "{a}", "a:msg:x", "a%7D", "..", "/", "\\", "x" * 300, "alice", "alice\x00", " alice ",
    "\uff41\uff4c\uff49\uff43\uff45", "al\u0131ce"])
TEXTS = st.one_of(st.text(max_size=20), ODD)
SCALARS = st.one_of(st.none(), st.booleans(), st.integers(), st.integers(min_value=2**63),
                    st.floats(allow_nan=True, allow_infinity=True), TEXTS)
JSONISH = st.recursive(SCALARS, lambda c: st.lists(c, max_size=4)
                       | st.dictionaries(TEXTS, c, max_size=4), max_leaves=16)
WEIRD = st.one_of(JSONISH, st.binary(max_size=8), st.tuples(SCALARS),
                  st.frozensets(st.integers(), max_size=3), st.builds(object),
                  st.dictionaries(st.integers(), SCALARS, min_size=1, max_size=2))
EXTRA_KEYS = st.sampled_from(["sender", "purpose", "traceId", "messageId", "intent", "replyTo",
                              "id", "version", "receiver", "createdAt", "trace_id", "__proto__",
                              "Recipient", "payload ", "recipient\x00"])
RECIPIENTS = st.one_of(
    st.just(ALICE),
    st.fixed_dictionaries(
        {"kind": st.sampled_from(["agent", "human", "group", "service", "robot", "", "AGENT"])},
        optional={"agentId": TEXTS, "userId": TEXTS, "conversationId": TEXTS,
                  "serviceId": TEXTS, "extra": JSONISH}),
    WEIRD)
ARGUMENTS = st.one_of(
    st.builds(lambda p: {"recipient": ALICE, "payload": p}, JSONISH),
    st.builds(lambda r, p: {"recipient": r, "payload": p}, RECIPIENTS, WEIRD),
    st.builds(lambda base, extra: {**base, **extra},
              st.fixed_dictionaries({}, optional={"recipient": RECIPIENTS, "payload": WEIRD}),
              st.dictionaries(st.one_of(EXTRA_KEYS, TEXTS), WEIRD, max_size=3)),
    WEIRD)
_STRUCTURE = ("outbox", "open", "leases", "settled")


@pytest.fixture
async def world(redis: Redis, ns: str) -> AsyncIterator[MessagingHost]:
    host = fault_app.build(redis, ns, request_timeout_s=5, turn_timeout_s=3, lease_s=2)
    await fault_app.grant_all(host, [fault_app.REQUESTER], ["alice"])
    try:
        async with host, LocalWorker(host, block_ms=50):
            yield host
    finally:
        await drop_namespace(redis, ns)


async def _durable(host: MessagingHost) -> tuple[set[str], int]:
    """Keys that carry requests (everything but audit/usage/grants) and the outbox length."""
    k = Keys(host.namespace)
    keys = {key for key in await keyspace(host.redis, host.namespace)
            if key.startswith((k.prefix + "msg:", k.prefix + "budget:"))}
    return keys, int(await host.redis.xlen(k.outbox))


async def _invoke(host: MessagingHost, arguments: Any) -> Any:
    trace = f"trace-{uuid.uuid4().hex[:12]}"
    context = host.context_for(fault_app.REQUESTER, purpose=fault_app.PURPOSE, trace_id=trace)
    try:
        call = ToolCall.from_wire({"id": f"call-{uuid.uuid4().hex[:8]}",
                                   "tool": "messages.request", "arguments": arguments,
                                   "traceId": trace, "requestedAt": format_timestamp()})
    except ContractError:
        return None  # refused at the wire boundary, before the kernel
    with anyio.fail_after(15):
        return await host.kernel.invoke_tool(context, call)


async def _check(host: MessagingHost, arguments: Any) -> None:
    before, outbox = await _durable(host)
    result = await _invoke(host, arguments)
    after, outbox_after = await _durable(host)
    if result is not None and result.status == "succeeded":
        assert result.output == {"echo": arguments["payload"], "by": "alice", "attempt": 1}
        mid = result.metadata["messageId"]
        created = {key for key in after - before if ":msg:" in key}
        assert created == {Keys(host.namespace).message(mid)}
        return
    if result is not None:
        assert result.status in {"denied", "failed"}, result
        assert result.error.code in REASON_CODES, result.error.code
        details = result.error.details or {}
        assert details.get("code", "payload_too_large") in REASON_CODES
    assert after == before, after ^ before  # no partial write
    assert outbox_after == outbox


@settings(max_examples=150, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(arguments=ARGUMENTS)
@example(arguments={"recipient": ALICE, "payload": "\ud800"})
@example(arguments={"recipient": ALICE, "payload": {"\udfff": "\x00"}})
@example(arguments={"recipient": ALICE, "payload": float("nan")})
@example(arguments={"recipient": {"kind": "agent", "agentId": "\x00"}, "payload": 1})
@example(arguments={"recipient": ALICE, "payload": 1, "sender": ALICE})
@example(arguments={"recipient": ALICE, "payload": 1, "replyTo": "m-1"})
async def test_fuzzed_request_arguments_end_typed_without_partial_writes(
        world: MessagingHost, arguments: Any) -> None:
    await _check(world, arguments)


def _nested(depth: int) -> Any:
    value: Any = "leaf"
    for _ in range(depth):
        value = [value]
    return value


EXTREME: dict[str, Any] = {
    "depth-60": _nested(60), "depth-64": _nested(64), "depth-100k": _nested(100_000),
    "string-1MiB": "x" * (1 << 20), "nul-5k": "\x00" * 5000,
    "keys-20k": {str(i): i for i in range(20_000)}, "int-2^200": 2**200, "int--2^64": -(2**64),
    "surrogate-pair-halves": ["\ud83d", "\ude00"], "bidi": "\u202e\u2066evil",
}


async def test_extreme_payloads_end_typed(world: MessagingHost) -> None:
    for name, payload in EXTREME.items():
        try:
            await _check(world, {"recipient": ALICE, "payload": payload})
        except AssertionError as exc:
            raise AssertionError(f"payload {name}: {exc}") from exc


async def test_recipient_output_that_cannot_be_encoded_fails_typed(redis: Redis, ns: str) -> None:
    """A recipient turn answering with a lone surrogate: the requester gets a typed
    failure at once and the worker keeps serving (the next request is replied)."""
    from tests.worker.helpers import answer, make_host

    host = make_host(redis, ns, {fault_app.REQUESTER: answer(None), "alice": answer("\ud800"),
                                 "bob": answer("ok")}, request_timeout_s=5, turn_timeout_s=3)
    await fault_app.grant_all(host, [fault_app.REQUESTER], ["alice", "bob"])
    try:
        with anyio.fail_after(15):
            async with host, LocalWorker(host, block_ms=50):
                bad = await ask(host, "alice", {"q": 1})
                good = await ask(host, "bob", {"q": 2})
    finally:
        await drop_namespace(redis, ns)
    assert bad.status == "failed", bad
    assert (bad.error.details or {}).get("outcome") != "request_timed_out", bad
    assert good.status == "succeeded" and good.output == "ok", good
