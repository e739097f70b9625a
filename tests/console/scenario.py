"""A namespace worth looking at: one finished tree (bob → alice, who asks carol and
dave), two open
requests (one from an agent whose id is hostile markup with bidi and control
characters) and one dead letter. Used by the console tests and the browser test."""

from __future__ import annotations

from dataclasses import dataclass

import anyio
from redis.asyncio import Redis

from sharedos_redis.kernel.contracts import JsonValue, MessageEnvelope, agent, format_timestamp
from sharedos_redis.kernel.ids import new_id
from sharedos_redis.kernel.turn import RuntimeHost, TurnRequest
from sharedos_redis.worker.host import MessagingHost
from sharedos_redis.worker.local import LocalWorker

from ..worker.helpers import answer, ask, invoke_grant, make_host, put, send_grant

HOSTILE = '<script>document.title="pwned"</script>\u202eexe.txt\x1b[31m\x07'
TRACE = "trace-console-tree"


async def _alice(turn: TurnRequest, host: RuntimeHost) -> JsonValue:
    answers = []
    for recipient in ("carol", "dave"):
        result = await host.call("messages.request", {
            "recipient": {"kind": "agent", "agentId": recipient}, "payload": {"q": "?"}})
        answers.append(result.status)
    return {"answers": answers}


@dataclass(frozen=True)
class Scenario:
    host: MessagingHost
    open_ids: tuple[str, ...]
    hostile_id: str
    dead_id: str


async def _accept(host: MessagingHost, sender: str, recipient: str, trace: str) -> str:
    context = host.context_for(sender, purpose="atlas-status", trace_id=trace)
    envelope = MessageEnvelope(id=new_id(), sender=agent(sender), receiver=agent(recipient),
                               purpose="atlas-status", payload={"q": "status?"}, trace_id=trace,
                               created_at=format_timestamp())
    receipt = await host.transport.deliver(context, envelope)
    assert receipt.status == "accepted", receipt
    return envelope.id


async def populate(redis: Redis, ns: str) -> Scenario:
    """Write the scenario into ``ns`` (no worker keeps running afterwards)."""
    host = make_host(redis, ns, {"bob": ask("alice", {"q": "status?"}),
                                 "alice": _alice, "carol": answer({"status": "green"}),
                                 "dave": answer({"status": "amber"}), HOSTILE: answer({})},
                     request_timeout_s=120, turn_timeout_s=60)
    await put(host, *(invoke_grant(ns, a) for a in ("bob", "alice", "carol", "dave")),
              send_grant(ns, "bob", "alice"), send_grant(ns, "alice", "carol"),
              send_grant(ns, "alice", "dave"))
    async with host, LocalWorker(host):
        with anyio.fail_after(20):
            result = await host.start_turn("bob", {"tick": 1}, purpose="atlas-status",
                                           trace_id=TRACE)
    reply = result.output["output"]  # type: ignore[index]
    assert reply == {"answers": ["succeeded", "succeeded"]}, result
    open_bob = await _accept(host, "bob", "alice", "trace-open")
    hostile = await _accept(host, HOSTILE, "alice", "trace-hostile")
    dead = await _accept(host, "bob", "carol", "trace-dead")
    settled = await host.markers.settle_failure(ns, dead, state="dead",
                                                code="request_dead_lettered")
    assert settled.settled
    return Scenario(host, (open_bob, hostile), hostile, dead)
