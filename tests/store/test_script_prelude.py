"""Every script runs with the shared Lua prelude in front, by EVALSHA and by the EVAL
fallback alike (a script that calls a prelude helper would fail without it)."""

from __future__ import annotations

import time

import fakeredis
import pytest

from sharedos_redis.store.keys import Keys
from sharedos_redis.store.scripts import PRELUDE, Scripts, lua_source, script_source

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
