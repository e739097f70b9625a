"""Text views of a delegation tree for ``sharedos-redis show``: pure formatting.

Owns :func:`render_tree` (``show --trace``: one line per request, indented under its
parent, children in accept order) and :func:`render_links` (``show <id>``: the lines
naming its parent and children). Ids, addresses, purposes and codes are chosen by
models and agents: every one goes through :func:`~.printable.printable`.
"""

from __future__ import annotations

from ..router.tree import DelegationTree, TraceNode
from .printable import printable

__all__ = ["describe", "render_links", "render_tree"]


def _duration(ms: int) -> str:
    return f"{ms / 1000:.3f}s"


def describe(node: TraceNode) -> str:
    """One request in one line: who asked whom, purpose, state (and code), attempt,
    duration, id."""
    outcome = node.state if node.code is None else f"{node.state} {node.code}"
    return (f"{node.sender} -> {node.recipient}  \"{node.purpose}\"  {outcome}  "
            f"attempt {node.attempt}  {_duration(node.duration_ms)}  [{node.id}]")


def render_tree(tree: DelegationTree) -> list[str]:
    """The tree as lines: a header, then every request under its parent."""
    opened = sum(1 for node in tree.nodes if node.open)
    lines = [printable(f"trace {tree.trace_id}: {len(tree.nodes)} requests, {opened} open")]
    by_id = {node.id: node for node in tree.nodes}

    def draw(node: TraceNode, prefix: str, last: bool, root: bool) -> None:
        branch = "" if root else ("└─ " if last else "├─ ")
        lines.append(prefix + branch + printable(describe(node)))
        below = prefix if root else prefix + ("   " if last else "│  ")
        for i, child in enumerate(node.children):
            draw(by_id[child], below, i == len(node.children) - 1, False)

    for root in tree.roots:
        draw(root, "", True, True)
    return lines


def render_links(tree: DelegationTree, message_id: str) -> list[str]:
    """``parent: ...`` and ``child: ...`` lines of one request of ``tree``."""
    node = tree.node(message_id)
    if node is None:
        return []
    parent = None if node.parent is None else tree.node(node.parent)
    if node.parent is None:
        lines = ["parent: - (a root request)"]
    elif parent is None:
        lines = [printable(f"parent: {node.parent} (record gone)")]
    else:
        lines = [printable(f"parent: {describe(parent)}")]
    lines += [printable(f"child:  {describe(child)}")
              for child in (tree.node(c) for c in node.children) if child is not None]
    lines.append(printable(f"trace:  {node.trace_id} (show --trace for the whole tree)"))
    return lines
