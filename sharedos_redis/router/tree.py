"""A trace's delegation tree as the router returns it (``RedisRequestRouter.tree``).

Owns ``TraceNode``, ``DelegationTree`` and ``read_tree``. The records come from
:mod:`sharedos_redis.store.tree` (the trace index and one pipeline of HMGETs, two round
trips for any size); parents are the records' ``parent`` fields; nodes and children
are in accept order (ties within a millisecond: parents first, then by their turn's call
order). A request whose record is gone (retention passed) is left out; a request whose
parent is left out is shown as a root. Imports no arq (its one transport import,
``child_id``, is pure).
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


def _call_indexes(records: list[RequestRecord]) -> dict[str, int]:
    """k for each record that is its parent turn's k-th call (``child_id(parent, k)``)."""
    siblings: dict[str, int] = {}
    for record in records:
        if record.parent is not None:
            siblings[record.parent] = siblings.get(record.parent, 0) + 1
    calls = {child_id(parent, k): k for parent, count in siblings.items()
             for k in range(1, 2 * count + 16)}
    return {r.id: calls[r.id] for r in records if r.id in calls}


def _accept_order(records: list[RequestRecord]) -> list[RequestRecord]:
    """``records`` in accept order. Accept times have millisecond resolution; within one
    millisecond a parent comes before its children (it was running when they were
    accepted), then children by their parent's place, then by their turn's call order."""
    by_id = {r.id: r for r in records}
    depth: dict[str, int] = {}
    for record in records:
        chain: list[RequestRecord] = []
        node = record
        while node.id not in depth and node.parent in by_id and len(chain) <= len(by_id):
            chain.append(node)
            node = by_id[node.parent]
        base = depth.setdefault(node.id, 0)
        for offset, linked in enumerate(reversed(chain), start=1):
            depth.setdefault(linked.id, base + offset)
    groups: dict[tuple[int, int], list[RequestRecord]] = {}
    for record in records:
        groups.setdefault((record.created_ms, depth[record.id]), []).append(record)
    call = _call_indexes(records)
    place: dict[str, int] = {}
    ordered: list[RequestRecord] = []
    for key in sorted(groups):
        group = sorted(groups[key], key=lambda r: (place.get(r.parent or "", -1),
                                                   call.get(r.id, 0), r.id))
        for record in group:
            place[record.id] = len(ordered)
            ordered.append(record)
    return ordered


async def read_tree(redis: Redis, namespace: str, trace_id: str) -> DelegationTree:
    """The delegation tree of ``trace_id`` (empty when the trace is unknown or expired).

    Raises:
        StoreUnavailable: Redis failed.
    """
    now_ms = await Scripts(redis).now_ms(Keys(namespace).open)
    records = _accept_order(list(await read_trace(redis, namespace, trace_id)))
    children: dict[str, list[str]] = {}
    for record in records:
        if record.parent is not None:
            children.setdefault(record.parent, []).append(record.id)
    nodes = tuple(TraceNode(**record.model_dump(), duration_ms=record.lasted_ms(now_ms),
                            children=tuple(children.get(record.id, ())))
                  for record in records)
    return DelegationTree(trace_id=trace_id, now_ms=now_ms, nodes=nodes)
