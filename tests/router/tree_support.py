"""Build real delegation trees: requests accepted by the transport inside the turns of
their parents (``turn_scope``), so each records its ``parent`` as a worker's turn would.

Each parent's turn is claimed first (running, attempt 1: the fencing token its nested
requests carry), then its children are accepted in call order with the turn's derived
ids. Leaves are left ``accepted``; ``settle`` ends some of them afterwards.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from redis.asyncio import Redis

from sharedos_redis.kernel.contracts import MessageEnvelope, agent, format_timestamp
from sharedos_redis.store.directory import AgentDirectory
from sharedos_redis.store.markers import MarkerStore, Settlement
from sharedos_redis.transport.transport import RedisStreamTransport, TransportSettings
from sharedos_redis.transport.turn_scope import TurnScope, turn_scope

from ..support import make_context


@dataclass
class Built:
    """The requests of a built tree: ids in accept order, each one's parent and envelope."""

    ids: list[str] = field(default_factory=list)
    parent: dict[str, str | None] = field(default_factory=dict)
    envelope: dict[str, MessageEnvelope] = field(default_factory=dict)

    def children(self, message_id: str) -> list[str]:
        return [mid for mid in self.ids if self.parent[mid] == message_id]

    def descendants(self, message_id: str) -> list[str]:
        found = []
        for child in self.children(message_id):
            found += [child, *self.descendants(child)]
        return found


async def _accept(redis: Redis, transport: RedisStreamTransport, ns: str, trace: str, sender: str,
                  recipient: str, purpose: str, message_id: str) -> MessageEnvelope:
    context = make_context(ns, agent(sender), trace=trace, purpose=purpose)
    envelope = MessageEnvelope(id=message_id, sender=context.actor, receiver=agent(recipient),
                               purpose=purpose, trace_id=trace, payload={"ask": recipient},
                               created_at=format_timestamp())
    # a live worker serves every recipient (its route lease): the accept checks it
    await AgentDirectory(redis).register(ns, [recipient], lease_s=3600)
    receipt = await transport.deliver(context, envelope)
    assert receipt.status == "accepted", receipt
    return envelope


async def build_tree(redis: Redis, ns: str, trace: str, fanout: list[int], *,
                     root_id: str = "root", root_purpose: str = "plan the week",
                     purpose: str = "step", root_timeout_s: float = 60) -> Built:
    """A tree whose level ``d`` nodes each ask ``fanout[d]`` agents (the last level's
    fan-outs are cut so ``fanout`` may describe a partial level: a negative entry
    ``-n`` means n children in total on that level, spread from the left). The root's
    deadline is ``root_timeout_s`` away, its descendants' 60 s."""
    transport = RedisStreamTransport(redis, settings=TransportSettings(default_budget_hops=500))
    first = RedisStreamTransport(redis, settings=TransportSettings(
        default_budget_hops=500, request_timeout_s=root_timeout_s))
    markers = MarkerStore(redis)
    built = Built()
    root = await _accept(redis, first, ns, trace, "bob", "a0", root_purpose, root_id)
    built.ids.append(root_id)
    built.parent[root_id], built.envelope[root_id] = None, root
    level = [root_id]
    for depth, width in enumerate(fanout):
        quota = -width if width < 0 else width * len(level)
        per = width if width > 0 else max(1, -(-quota // len(level)))
        nxt: list[str] = []
        for parent in level:
            if quota <= 0:
                break
            claim = await markers.claim_turn(ns, parent, lease_ms=120_000, max_attempts=3,
                                             worker="builder")
            assert claim.outcome == "claimed", claim
            sender = built.envelope[parent].receiver.id
            with turn_scope(TurnScope(ns, parent, claim.attempt)) as scope:
                for _ in range(min(per, quota)):
                    mid = scope.next_request_id()
                    env = await _accept(redis, transport, ns, trace, sender,
                                        f"a{depth + 1}-{len(nxt)}", purpose, mid)
                    built.ids.append(mid)
                    built.parent[mid], built.envelope[mid] = parent, env
                    nxt.append(mid)
                    quota -= 1
        level = nxt
    return built


async def reply(redis: Redis, ns: str, request: MessageEnvelope) -> None:
    """Settle ``request`` with its recipient's correct reply."""
    settlement = await reply_refused(redis, ns, request)
    assert settlement.settled, settlement


async def reply_refused(redis: Redis, ns: str, request: MessageEnvelope) -> Settlement:
    """Try to settle ``request`` with its recipient's correct reply; the settlement."""
    answer = MessageEnvelope(id=f"r-{request.id}", sender=request.receiver,
                             receiver=request.sender, purpose=request.purpose,
                             trace_id=request.trace_id, payload={"done": True},
                             created_at=format_timestamp(), reply_to=request.id)
    return await MarkerStore(redis).settle_reply(ns, answer)
