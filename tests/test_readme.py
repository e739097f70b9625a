"""Every Python block of README.md runs as written, in order, in one module namespace:
on fakeredis (a TCP fake server, so the README's own connection code is used) and on
the real Redis at REDIS_URL. ``test_*`` coroutines a block defines are run too."""

from __future__ import annotations

import inspect
import os
import re
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from fakeredis import TcpFakeServer
from redis.asyncio import Redis

from .support import drop_namespace

README = Path(__file__).resolve().parents[1] / "README.md"
_BLOCK = re.compile(r"^```python\n(.*?)^```", re.DOTALL | re.MULTILINE)


def python_blocks() -> list[str]:
    return _BLOCK.findall(README.read_text())


def test_the_readme_has_the_blocks_it_promises() -> None:
    blocks = python_blocks()
    assert len(blocks) >= 4
    assert any("def host()" in b for b in blocks) and any("anyio.run(main)" in b for b in blocks)
    assert any("async def test_" in b for b in blocks)


@pytest.fixture(params=["fake", pytest.param("real", marks=pytest.mark.real_redis)])
def redis_url(request: pytest.FixtureRequest) -> Iterator[str]:
    if request.param == "real":
        yield os.environ.get("REDIS_URL") or pytest.skip("REDIS_URL is not set")
        return
    server = TcpFakeServer(("127.0.0.1", 0), server_type="redis")
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"redis://127.0.0.1:{server.server_address[1]}/0"
    finally:
        server.shutdown()
        server.server_close()


def test_every_python_block_runs_as_written(redis_url: str, ns: str,
                                            monkeypatch: pytest.MonkeyPatch,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("SHAREDOS_REDIS_URL", redis_url)
    monkeypatch.setenv("SHAREDOS_NAMESPACE", ns)
    module: dict[str, Any] = {"__name__": "readme"}
    try:
        for number, block in enumerate(python_blocks(), 1):
            exec(compile(block, f"README.md python block {number}", "exec"), module)
        tests = [fn for name, fn in module.items()
                 if name.startswith("test_") and inspect.iscoroutinefunction(fn)]
        assert tests
        for test in tests:
            anyio.run(test, backend="asyncio")
    finally:
        anyio.run(_drop, redis_url, ns, backend="asyncio")
    printed = capsys.readouterr().out.splitlines()
    assert "succeeded {'status': 'green'}" in printed  # the minimal host
    model_turns = 'Alice says: {"status": "succeeded", "output": "Atlas is green."}'
    assert model_turns in printed


async def _drop(url: str, ns: str) -> None:
    client = Redis.from_url(url)
    try:
        await drop_namespace(client, ns)
    finally:
        await client.aclose()
