"""The worker's event loop: uvloop when the ``fast`` extra is installed, unless turned off."""

from __future__ import annotations

import asyncio
import importlib.util

import pytest

from sharedos_redis.worker.loop import run, uvloop_enabled


async def _loop_module() -> str:
    return type(asyncio.get_running_loop()).__module__


@pytest.mark.skipif(importlib.util.find_spec("uvloop") is None, reason="fast extra not installed")
def test_the_worker_loop_is_uvloop_when_installed(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SHAREDOS_UVLOOP", raising=False)
    assert uvloop_enabled()
    assert run(_loop_module()).startswith("uvloop")


def test_sharedos_uvloop_0_keeps_the_standard_loop(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SHAREDOS_UVLOOP", "0")
    assert not uvloop_enabled()
    assert run(_loop_module()).startswith("asyncio")
