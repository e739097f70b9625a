"""A trace's delegation tree, built from the request records' recorded parents.

Every request records the request whose turn made it (``parent``); a request without
one (or whose parent's record is gone) hangs off a root node for its sender (a
host-started turn). States and durations come from the request records. Laid out for
an SVG picture: leaves left to right, parents centred above. Pure.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

__all__ = ["NODE_H", "NODE_W", "Accepted", "TreeNode", "build_tree", "layout"]

NODE_W, NODE_H, GAP_X, GAP_Y = 190, 48, 24, 40


@dataclass(frozen=True)
class Accepted:
    """One accepted request of the trace; ``parent`` is the request whose turn made it."""

    message_id: str
    sender: str
    recipient: str
    parent: str | None = None


@dataclass
class TreeNode:
    """A root turn (``message_id`` None) or one request and the recipient's turn."""

    agent: str
    message_id: str | None = None
    state: str = "root"
    code: str | None = None
    duration_ms: int | None = None
    children: list[TreeNode] = field(default_factory=list)
    x: int = 0
    y: int = 0

    def walk(self) -> Iterable[TreeNode]:
        """This node and every descendant, depth first."""
        yield self
        for child in self.children:
            yield from child.walk()


def build_tree(requests: Sequence[Accepted],
               records: Mapping[str, Mapping[str, str | None]]) -> list[TreeNode]:
    """The forest of ``requests`` in accept order (usually one tree); ``records`` by
    message id give ``state``, ``code``, ``created`` and ``updated`` (ms) where the
    record is kept."""
    roots: list[TreeNode] = []
    root_of: dict[str, TreeNode] = {}
    made: dict[str, TreeNode] = {}
    for request in requests:
        parent = None if request.parent is None else made.get(request.parent)
        if parent is None:
            parent = root_of.get(request.sender)
            if parent is None:
                parent = root_of[request.sender] = TreeNode(agent=request.sender)
                roots.append(parent)
        record = records.get(request.message_id, {})
        node = TreeNode(agent=request.recipient, message_id=request.message_id,
                        state=record.get("state") or "expired", code=record.get("code"),
                        duration_ms=_duration(record))
        parent.children.append(node)
        made[request.message_id] = node
    return roots


def _duration(record: Mapping[str, str | None]) -> int | None:
    created, updated = record.get("created"), record.get("updated")
    if not created or not updated:
        return None
    return max(0, int(updated) - int(created))


def layout(roots: Sequence[TreeNode]) -> tuple[int, int]:
    """Place every node (``x``, ``y`` of its top-left corner); returns (width, height)."""
    next_leaf = 0
    depth_max = 0

    def place(node: TreeNode, depth: int) -> None:
        nonlocal next_leaf, depth_max
        depth_max = max(depth_max, depth)
        node.y = GAP_Y // 2 + depth * (NODE_H + GAP_Y)
        if not node.children:
            node.x = GAP_X // 2 + next_leaf * (NODE_W + GAP_X)
            next_leaf += 1
            return
        for child in node.children:
            place(child, depth + 1)
        node.x = (node.children[0].x + node.children[-1].x) // 2

    for root in roots:
        place(root, 0)
    width = max(1, next_leaf) * (NODE_W + GAP_X)
    height = (depth_max + 1) * (NODE_H + GAP_Y)
    return width, height
