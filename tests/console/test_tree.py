"""The delegation tree from the requests' recorded parents: nesting, roots, layout."""

from __future__ import annotations

from sharedos_redis.console.tree import NODE_W, Accepted, build_tree, layout


def _req(mid: str, sender: str, recipient: str, parent: str | None = None) -> Accepted:
    return Accepted(mid, f"agent:{sender}", f"agent:{recipient}", parent)


def test_a_chain_and_a_fan_out_nest_under_their_senders_turns() -> None:
    requests = [_req("1", "bob", "alice"), _req("2", "alice", "carol", "1"),
                _req("3", "alice", "dave", "1"), _req("4", "bob", "erin")]
    records = {"1": {"state": "replied", "created": "1000", "updated": "1250"},
               "2": {"state": "failed", "code": "recipient_turn_failed", "created": "1010",
                     "updated": "1020"}}
    [root] = build_tree(requests, records)
    assert root.agent == "agent:bob" and root.message_id is None
    assert [c.agent for c in root.children] == ["agent:alice", "agent:erin"]
    alice = root.children[0]
    assert [c.agent for c in alice.children] == ["agent:carol", "agent:dave"]
    assert alice.state == "replied" and alice.duration_ms == 250
    assert alice.children[0].code == "recipient_turn_failed"
    assert alice.children[1].state == "expired" and alice.children[1].duration_ms is None
    width, height = layout([root])
    nodes = list(root.walk())
    assert len(nodes) == 5 and len({(n.x, n.y) for n in nodes}) == 5
    assert width == 3 * (NODE_W + 24) and height > 2 * alice.y
    assert alice.children[0].x < alice.x < alice.children[1].x  # centred over its children


def test_ping_pong_nests_each_request_under_its_recorded_parent() -> None:
    requests = [_req("1", "ping", "pong"), _req("2", "pong", "ping", "1"),
                _req("3", "ping", "pong", "2")]
    [root] = build_tree(requests, {})
    depth, node = 0, root
    while node.children:
        [node] = node.children
        depth += 1
    assert depth == 3 and node.message_id == "3"


def test_two_host_started_senders_make_two_roots() -> None:
    roots = build_tree([_req("1", "bob", "alice"), _req("2", "eve", "alice")], {})
    assert [r.agent for r in roots] == ["agent:bob", "agent:eve"]


def test_the_recorded_parent_wins_over_who_was_asked_last() -> None:
    # alice was asked twice; the second request's turn made nothing: carol's request
    # belongs under the first one, which the recorded parent says (no guessing)
    requests = [_req("1", "bob", "alice"), _req("2", "bob", "alice"),
                _req("3", "alice", "carol", "1")]
    [root] = build_tree(requests, {})
    first, second = root.children
    assert [c.message_id for c in first.children] == ["3"] and second.children == []


def test_a_request_whose_parent_record_is_gone_hangs_off_its_senders_root() -> None:
    [root] = build_tree([_req("2", "alice", "carol", "expired-parent")], {})
    assert root.agent == "agent:alice" and [c.message_id for c in root.children] == ["2"]
