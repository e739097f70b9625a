"""Identifiers built to collide keys across namespaces never cross.

Namespaces ``b``, ``b}``, ``{b}``, ``b:msg:x``, ``b%7D`` (``b`` unique per run) with
the same message ids each: every request is accepted (no cross-namespace
duplicate), lands in its own key, and settling one touches no other.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator

import pytest
from hypothesis import given
from hypothesis import strategies as st
from redis.asyncio import Redis

from sharedos_redis.kernel.contracts import MessageEnvelope, agent, format_timestamp
from sharedos_redis.store.keys import Keys
from tests.worker.helpers import drop_namespace

from ..support import serve
from . import fault_app
from .inspect_ns import keyspace, message_ids, states

pytestmark = pytest.mark.anyio

IDS = ["m", "m}", "{m}", "m:x", "m%7D", "m%257D", "msg:m", "m\x00", "\uff4d"]


@pytest.fixture
async def namespaces(redis: Redis) -> AsyncIterator[list[str]]:
    base = f"c{uuid.uuid4().hex[:8]}"
    names = [base, base + "}", "{" + base + "}", base + ":msg:x", base + "%7D", base + "%257D",
             base + "*", base + "\\"]
    yield names
    for name in names:
        await drop_namespace(redis, name)


def _envelope(mid: str) -> MessageEnvelope:
    return MessageEnvelope(id=mid, sender=agent(fault_app.REQUESTER), receiver=agent("alice"),
                           purpose=fault_app.PURPOSE, payload={"mid": mid}, trace_id="t}",
                           created_at=format_timestamp())


async def test_lookalike_namespaces_and_ids_never_cross(redis: Redis,
                                                        namespaces: list[str]) -> None:
    hosts = {name: fault_app.build(redis, name) for name in namespaces}
    for name, host in hosts.items():
        await serve(redis, name, "alice")  # its route lease, as if a worker served it
        context = host.context_for(fault_app.REQUESTER, purpose=fault_app.PURPOSE, trace_id="t}")
        for mid in IDS:
            receipt = await host.transport.deliver(context, _envelope(mid))
            assert receipt.status == "accepted", (name, mid, receipt)
    for name in namespaces:
        assert await message_ids(redis, name) == sorted(IDS)
        assert all(key.startswith(Keys(name).prefix) for key in await keyspace(redis, name))
    victim, attacker = namespaces[1], namespaces[4]  # "b}" and its percent-encoded lookalike
    request = _envelope("m}")
    reply = MessageEnvelope(id="r-1", sender=request.receiver, receiver=request.sender,
                            purpose=request.purpose, payload={"x": 1}, trace_id="t}",
                            created_at=format_timestamp(), reply_to="m}")
    assert (await hosts[victim].router.settle_reply(victim, reply)).settled
    refused = await hosts[victim].router.settle_reply(victim, reply)
    assert (refused.settled, refused.code) == (False, "request_closed")
    assert (await hosts[attacker].router.settle_reply(attacker, reply)).settled
    for name in namespaces:
        got = await states(redis, name, IDS)
        expected = {mid: "replied" if name in (victim, attacker) and mid == "m}" else "accepted"
                    for mid in IDS}
        assert got == expected, name


@given(st.text(max_size=12), st.text(max_size=12), st.text(max_size=12), st.text(max_size=12))
def test_message_keys_are_injective_and_prefixes_disjoint(ns1: str, id1: str, ns2: str,
                                                          id2: str) -> None:
    k1, k2 = Keys(ns1), Keys(ns2)
    if (ns1, id1) != (ns2, id2):
        assert k1.message(id1) != k2.message(id2)
    if ns1 != ns2:
        assert not k1.message(id1).startswith(k2.prefix)
        assert not k1.budget(id1).startswith(k2.prefix)
