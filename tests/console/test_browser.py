"""The console in a real browser: headless Chromium (Debian's ``chromium`` and
``chromium-driver``, driven by Selenium) against ``sharedos-redis console`` in its own
process on real Redis. Checks the pending table, opens a request, draws a trace's
tree and shows a hostile agent id inert. With ``SHAREDOS_WRITE_SCREENSHOTS=1`` it
writes the README's screenshots to ``docs/``. Real Redis only; marked slow.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import anyio
import httpx
import pytest
from redis.asyncio import Redis

from ..worker.helpers import drop_namespace
from .scenario import HOSTILE, TRACE, Scenario, populate

pytestmark = [pytest.mark.anyio, pytest.mark.slow]
ROOT = Path(__file__).resolve().parents[2]
CHROMIUM, DRIVER = "/usr/bin/chromium", "/usr/bin/chromedriver"


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture
def browser() -> Iterator[object]:
    if not (Path(CHROMIUM).exists() and Path(DRIVER).exists()):
        if os.environ.get("CI"):
            pytest.fail("CI must install Debian's chromium and chromium-driver (.ci/run)")
        pytest.skip("no /usr/bin/chromium or /usr/bin/chromedriver")
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                "--window-size=1100,680", "--hide-scrollbars"):
        options.add_argument(arg)
    driver = webdriver.Chrome(service=Service(executable_path=DRIVER), options=options)
    driver.set_page_load_timeout(20)
    yield driver
    driver.quit()


@pytest.fixture
async def scenario(url: str, ns: str) -> AsyncIterator[Scenario]:
    redis = Redis.from_url(url)
    yield await populate(redis, ns)
    await drop_namespace(redis, ns)
    await redis.aclose()


@pytest.fixture
def console(url: str, ns: str) -> Iterator[str]:
    port = _free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "sharedos_redis.worker.cli", "--redis-url", url, "--namespace",
         ns, "console", "--port", str(port)], cwd=ROOT, stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL)
    yield f"http://127.0.0.1:{port}"
    proc.terminate()
    proc.wait(timeout=10)


async def _until_serving(base: str) -> None:
    with anyio.fail_after(15):
        async with httpx.AsyncClient() as client:
            while True:
                try:
                    if (await client.get(f"{base}/")).status_code == 200:
                        return
                except httpx.TransportError:
                    pass
                await anyio.sleep(0.1)


def _shoot(driver: object, name: str) -> None:
    path = Path(os.environ.get("PYTEST_TMP", "/tmp")) / name
    driver.save_screenshot(str(path))  # type: ignore[attr-defined]
    assert path.stat().st_size > 10_000  # a real picture, not a blank page
    if os.environ.get("SHAREDOS_WRITE_SCREENSHOTS") == "1":
        shutil.copy(path, ROOT / "docs" / name)


async def test_console_in_chromium(console: str, ns: str, scenario: Scenario,
                                   browser: object) -> None:
    from selenium.webdriver.common.by import By

    await _until_serving(console)
    driver = browser
    get, find = driver.get, driver.find_elements  # type: ignore[attr-defined]
    get(f"{console}/pending?ns={ns}&refresh=0")
    rows = find(By.CSS_SELECTOR, "[data-testid=pending-row]")
    assert len(rows) == 2
    parties = [row.find_element(By.CSS_SELECTOR, "[data-testid=parties]").text for row in rows]
    hostile = next(text for text in parties if "script" in text)
    # shown as characters: markup as text, the bidi override and controls as escapes
    assert hostile.startswith('agent:<script>document.title="pwned"</script>')
    assert "\\u202eexe.txt\\u001b[31m\\u0007" in hostile and "\u202e" not in hostile
    assert find(By.TAG_NAME, "script") == []
    assert driver.title != "pwned"  # type: ignore[attr-defined]
    assert driver.execute_script("return 1") == 1  # type: ignore[attr-defined]  # JS runs
    _shoot(driver, "console-pending.png")

    link = driver.find_element(By.LINK_TEXT, scenario.open_ids[0])  # type: ignore[attr-defined]
    link.click()
    assert "Request" in driver.find_element(By.TAG_NAME, "h1").text  # type: ignore[attr-defined]
    events = [e.text for e in find(By.CSS_SELECTOR, "[data-testid=event]")]
    assert any("message.accepted" in e for e in events)

    get(f"{console}/trace?ns={ns}&id={TRACE}")
    nodes = find(By.CSS_SELECTOR, "[data-testid=tree-node]")
    assert len(nodes) == 4
    assert [n.find_element(By.TAG_NAME, "text").text.split()[0] for n in nodes] == [
        "agent:bob", "agent:alice", "agent:carol", "agent:dave"]
    tree = driver.find_element(By.CSS_SELECTOR, "[data-testid=tree]")  # type: ignore[attr-defined]
    assert tree.size["width"] > 200 and tree.size["height"] > 100  # drawn, not just listed
    _shoot(driver, "console.png")
    assert HOSTILE not in driver.page_source  # type: ignore[attr-defined]
