"""Every script runs with the shared Lua prelude in front, by EVALSHA and by the EVAL
fallback alike (a script that calls a prelude helper would fail without it); named
arguments are spelled once a side and a name missing or unknown on either side fails."""

from __future__ import annotations

import re
import time
from importlib import resources

import fakeredis
import pytest
from redis.asyncio import Redis

from sharedos_redis.store.keys import Keys
from sharedos_redis.store.scripts import (
    PRELUDE,
    Scripts,
    argument_names,
    lua_source,
    named_args,
    script_source,
)

pytestmark = pytest.mark.anyio


def test_each_script_is_the_prelude_then_its_own_text_then_the_audit_flush() -> None:
    source = script_source("server_time")
    assert source.startswith(lua_source(PRELUDE))
    body = source.index(lua_source("server_time"))
    assert source[body + len(lua_source("server_time")):].split() == [
        "end", "local", "result", "=", "body()", "audit_flush()", "return", "result"]


async def test_the_eval_fallback_runs_the_prelude_too(monkeypatch: pytest.MonkeyPatch) -> None:
    redis = fakeredis.FakeAsyncRedis(server=fakeredis.FakeServer())
    scripts = Scripts(redis)
    missing = "0" * 40

    async def load_elsewhere(script: str) -> str:
        return missing  # SCRIPT LOAD went to another node: EVALSHA fails twice

    monkeypatch.setattr(redis, "script_load", load_elsewhere)
    scripts._script("server_time").sha = missing
    now = await scripts.now_ms(Keys("prelude").outbox)  # server_time calls now_ms()
    assert abs(now - time.time() * 1000) < 60_000
    await redis.aclose()


def _named_scripts() -> list[str]:
    lua = resources.files("sharedos_redis.store").joinpath("lua")
    return sorted(entry.name.removesuffix(".lua") for entry in lua.iterdir()
                  if entry.name.endswith(".lua") and "named()" in entry.read_text("utf-8")
                  and entry.name != f"{PRELUDE}.lua")


def test_the_record_scripts_take_named_arguments() -> None:
    assert {"accept_request", "claim_turn", "dispatch_request", "marker_redrive",
            "settle_failure", "settle_reply"} <= set(_named_scripts())


@pytest.mark.parametrize("name", _named_scripts())
def test_a_script_reads_exactly_the_names_its_header_declares(name: str) -> None:
    source = lua_source(name)
    body = "\n".join(line for line in source.splitlines() if not line.startswith("--"))
    used = set(re.findall(r"(?<![\w.])a\.([A-Za-z_]\w*)", body))
    assert argument_names(name) and used == argument_names(name)
    assert "ARGV" not in body.replace("ARGV[1]", "")  # no positional reads beside named()


def test_named_args_are_the_count_the_pairs_then_the_rest() -> None:
    args = named_args("dispatch_request", "h", "r1", group="g", entry="1-0", id="m-1", now=5,
                      at="t", event="ev", audit_maxlen=10)
    assert args[0] == 7 and args[-2:] == ["h", "r1"]
    assert dict(zip(args[1:15:2], args[2:15:2], strict=True)) == {
        "group": "g", "entry": "1-0", "id": "m-1", "now": 5, "at": "t", "event": "ev",
        "audit_maxlen": 10}


def test_a_missing_or_unknown_name_fails_before_redis_is_called() -> None:
    names = dict(group="g", entry="1-0", id="m-1", now=5, at="t", event="ev", audit_maxlen=10)
    with pytest.raises(TypeError, match=r"missing arguments \['audit_maxlen'\], unknown \[\]"):
        named_args("dispatch_request", **{k: v for k, v in names.items() if k != "audit_maxlen"})
    with pytest.raises(TypeError, match=r"missing arguments \[\], unknown \['maxlen'\]"):
        named_args("dispatch_request", **names, maxlen=10)


async def test_named_reads_the_pairs_and_leaves_the_rest_addressable(redis: Redis) -> None:
    probe = (f"{lua_source(PRELUDE)}\nlocal a, rest = named()\n"
             "return {tostring(a.x), tostring(a.y), tostring(a.z), rest, tostring(ARGV[rest])}")
    assert await redis.eval(probe, 0, 2, "x", "1", "y", "", "h", "r1") == [
        b"1", b"", b"nil", 6, b"h"]  # the records a script carries start at ``rest``
    assert await redis.eval(probe, 0, 0, "h") == [b"nil", b"nil", b"nil", 2, b"h"]
    assert await redis.eval(probe, 0, 0) == [b"nil", b"nil", b"nil", 2, b"nil"]
