"""The worker's event loop: asyncio by default, uvloop with ``SHAREDOS_UVLOOP=1``."""

from __future__ import annotations

import asyncio
import importlib.util
import sys

import pytest

from sharedos_redis.errors import ConfigurationError
from sharedos_redis.worker.loop import run, uvloop_enabled


async def _loop_module() -> str:
    return type(asyncio.get_running_loop()).__module__


def test_the_standard_loop_by_default(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SHAREDOS_UVLOOP", raising=False)
    assert not uvloop_enabled()
    assert run(_loop_module()).startswith("asyncio")


@pytest.mark.skipif(importlib.util.find_spec("uvloop") is None, reason="fast extra not installed")
def test_sharedos_uvloop_1_runs_on_uvloop(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SHAREDOS_UVLOOP", "1")
    assert run(_loop_module()).startswith("uvloop")


def test_asking_for_uvloop_without_it_is_a_configuration_error(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SHAREDOS_UVLOOP", "1")
    monkeypatch.setitem(sys.modules, "uvloop", None)  # as if not installed
    coroutine = _loop_module()
    with pytest.raises(ConfigurationError, match="fast"):
        run(coroutine)
    coroutine.close()
