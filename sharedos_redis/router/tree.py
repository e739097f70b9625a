"""A trace's delegation tree as the router returns it (``RedisRequestRouter.tree``).

Owns ``TraceNode``, ``DelegationTree`` and ``read_tree``. The records come from
:mod:`sharedos_redis.store.tree` (the trace index and one pipeline of HMGETs, two round
trips for any size); parents are the records' ``parent`` fields, children are ordered
by accept time (ties within a millisecond by their turn's call order). A request whose
record is gone (retention passed) is left out; a request whose parent is left out is
shown as a root. Imports no arq (its one transport import, ``child_id``, is pure).
"""

from __future__ import annotations

from collections.abc import Iterator

from pydantic import BaseModel, ConfigDict
from redis.asyncio import Redis

from ..store.keys import Keys
from ..store.scripts import Scripts
from ..store.tree import RequestRecord, read_trace
from ..transport.turn_scope import child_id

__all__ = ["DelegationTree", "TraceNode", "read_tree"]


class TraceNode(RequestRecord):
    """One request of the tree: its record, how long it ran (to now while open) and its
    children's ids in accept order."""

    duration_ms: int
    children: tuple[str, ...]


class DelegationTree(BaseModel):
    """Every kept request of one trace, in accept order, linked parent → children."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    trace_id: str
    now_ms: int
    nodes: tuple[TraceNode, ...]

    def node(self, message_id: str) -> TraceNode | None:
        """The node of ``message_id``, if it is in the tree."""
        return next((n for n in self.nodes if n.id == message_id), None)

    @property
    def roots(self) -> list[TraceNode]:
        """Requests without a parent in the tree, in accept order."""
        ids = {n.id for n in self.nodes}
        return [n for n in self.nodes if n.parent is None or n.parent not in ids]

    def walk(self) -> Iterator[tuple[int, TraceNode]]:
        """(depth, node) depth first, children in accept order."""
        by_id = {n.id: n for n in self.nodes}
        stack = [(0, root) for root in reversed(self.roots)]
        while stack:
            depth, node = stack.pop()
            yield depth, node
            stack.extend((depth + 1, by_id[c]) for c in reversed(node.children))


def _in_call_order(parent: str, found: list[RequestRecord]) -> list[RequestRecord]:
    """Siblings by accept time; those accepted in the same millisecond by the order their
    turn made them (a nested id is ``child_id(parent, k)`` for the k-th call)."""
    call = {child_id(parent, k): k for k in range(1, 2 * len(found) + 16)}
    return sorted(found, key=lambda c: (c.created_ms, call.get(c.id, len(call) + 1)))


async def read_tree(redis: Redis, namespace: str, trace_id: str) -> DelegationTree:
    """The delegation tree of ``trace_id`` (empty when the trace is unknown or expired).

    Raises:
        StoreUnavailable: Redis failed.
    """
    now_ms = await Scripts(redis).now_ms(Keys(namespace).open)
    records = await read_trace(redis, namespace, trace_id)
    by_parent: dict[str, list[RequestRecord]] = {}
    for record in records:
        if record.parent is not None:
            by_parent.setdefault(record.parent, []).append(record)
    children = {parent: [c.id for c in _in_call_order(parent, found)]
                for parent, found in by_parent.items()}
    nodes = tuple(TraceNode(**record.model_dump(), duration_ms=record.lasted_ms(now_ms),
                            children=tuple(children.get(record.id, ())))
                  for record in records)
    return DelegationTree(trace_id=trace_id, now_ms=now_ms, nodes=nodes)
