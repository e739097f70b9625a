"""``sharedos-redis show --trace``: a 30-request delegation tree rendered by the CLI in a
subprocess (compared to a snapshot with ids and durations normalised), ``show <id>``'s
parent and children lines, and hostile ids and purposes rendered inert."""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path

import anyio
import pytest
from redis.asyncio import Redis

from sharedos_redis.router.router import RedisRequestRouter
from sharedos_redis.store.markers import MarkerStore

from ..router.tree_support import Built, build_tree, reply
from ..servers import RedisServer

pytestmark = pytest.mark.anyio
ROOT = Path(__file__).resolve().parents[2]
SNAPSHOT = Path(__file__).parent / "snapshots" / "show_trace_30.txt"
UNSAFE = re.compile("[\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069]")


async def _show(url: str, ns: str, *args: str) -> tuple[int, str, str]:
    done = await anyio.run_process(
        [sys.executable, "-m", "sharedos_redis.worker.cli", "--redis-url", url,
         "--namespace", ns, "show", *args],
        cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)}, check=False)
    return done.returncode, done.stdout.decode(), done.stderr.decode()


def _normalised(text: str, built: Built) -> str:
    for k, mid in enumerate(built.ids):
        text = text.replace(mid, f"#{k}")
    return re.sub(r"\d+\.\d{3}s", "<t>", text)


async def test_a_thirty_request_tree_renders_as_its_snapshot(server: RedisServer,
                                                           client: Redis, ns: str) -> None:
    built = await build_tree(client, ns, "trace-30", [3, 3, -17])
    second = built.ids[2]
    for mid in [*built.descendants(second)[::-1], second]:  # a1-1's subtree answered
        await reply(client, ns, built.envelope[mid])
    await MarkerStore(client).settle_failure(ns, built.ids[-1], state="failed",
                                             code="recipient_turn_failed")

    code, out, err = await _show(server.url, ns, "--trace", "trace-30")

    assert code == 0, err
    rendered = _normalised(out, built)
    if os.environ.get("UPDATE_SNAPSHOTS"):
        SNAPSHOT.write_text(rendered)
    assert rendered == SNAPSHOT.read_text()

    await RedisRequestRouter(client).cancel(ns, "root")  # the whole open tree ends with it
    code, out, err = await _show(server.url, ns, "--trace", "trace-30")
    assert code == 0, err
    expected = [re.sub(r'"  (running|accepted)  ', '"  cancelled request_cascade_cancelled  ',
                       line) for line in rendered.splitlines()[1:]]
    expected[0] = expected[0].replace("cancelled request_cascade_cancelled",
                                      "cancelled request_cancelled")
    lines = _normalised(out, built).splitlines()
    assert lines[0] == "trace trace-30: 30 requests, 0 open" and lines[1:] == expected


async def test_show_links_a_request_to_its_parent_and_children(server: RedisServer,
                                                               client: Redis, ns: str) -> None:
    built = await build_tree(client, ns, "trace-l", [2, 1])
    middle = built.ids[1]

    code, out, err = await _show(server.url, ns, middle)

    assert code == 0, err
    lines = _normalised(out, built).splitlines()
    assert lines[0] == ('parent: agent:bob -> agent:a0  "plan the week"  running  attempt 1  '
                        '<t>  [#0]')
    assert lines[1] == 'child:  agent:a1-0 -> agent:a2-0  "step"  accepted  attempt 0  <t>  [#3]'
    assert lines[2] == "trace:  trace-l (show --trace for the whole tree)"
    code, out, _ = await _show(server.url, ns, "root")
    assert out.splitlines()[0] == "parent: - (a root request)"
    assert sum(line.startswith("child:") for line in out.splitlines()) == 2
    code, _, err = await _show(server.url, ns, "--trace", "no-such-trace")
    assert code == 1 and "no request of trace 'no-such-trace'" in err


async def test_hostile_ids_and_purposes_render_inert(server: RedisServer, client: Redis,
                                                     ns: str) -> None:
    hostile = "x\x1b[2J\x1b]0;owned\x07\u202egnp.exe\r\nfake line"
    built = await build_tree(client, ns, hostile, [2], root_id=f"root{hostile}",
                             root_purpose=f"plan{hostile}", purpose=f"step{hostile}")

    code, out, err = await _show(server.url, ns, "--trace", hostile)

    assert code == 0, err
    assert not UNSAFE.search(out.replace("\n", ""))  # newlines only between lines
    assert len(out.splitlines()) == 1 + len(built.ids)  # no line forged by an id or purpose
    assert "\\u001b[2J" in out and "\\u202e" in out and "\\u000d\\u000afake line" in out
    code, out, _ = await _show(server.url, ns, f"root{hostile}")
    assert code == 0 and not UNSAFE.search(out.replace("\n", ""))
