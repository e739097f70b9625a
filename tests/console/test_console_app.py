"""The console's pages over the ASGI interface (fakeredis and real Redis): what they
show, that hostile strings are inert, that nothing changes state, and the token."""

from __future__ import annotations

from collections.abc import AsyncIterator

import httpx
import pytest
from redis.asyncio import Redis

from sharedos_redis.console import ConsoleSettings, create_app
from sharedos_redis.console.inert import inert

from ..otel_sdk import Sdk
from ..worker.helpers import drop_namespace
from .scenario import HOSTILE, TRACE, Scenario, populate

pytestmark = pytest.mark.anyio


@pytest.fixture
async def scenario(redis: Redis, ns: str) -> AsyncIterator[Scenario]:
    yield await populate(redis, ns)
    await drop_namespace(redis, ns)


def _client(redis: Redis, ns: str, **settings: object) -> httpx.AsyncClient:
    app = create_app(redis, ConsoleSettings([ns], **settings))  # type: ignore[arg-type]
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://console")


async def test_pages_show_the_namespace(redis: Redis, ns: str, scenario: Scenario) -> None:
    async with _client(redis, ns) as client:
        pending = await client.get("/pending", params={"ns": ns})
        assert pending.status_code == 200
        assert pending.text.count('data-testid="pending-row"') == 2
        assert '<meta http-equiv="refresh" content="5">' in pending.text
        only_bob = await client.get("/pending", params={"ns": ns, "agent": "bob"})
        assert only_bob.text.count('data-testid="pending-row"') == 1
        request = await client.get("/request", params={"ns": ns, "id": scenario.open_ids[0]})
        assert request.status_code == 200 and "message.accepted" in request.text
        tree = await client.get("/trace", params={"ns": ns, "id": TRACE})
        assert tree.text.count('data-testid="tree-node"') == 4  # bob, alice, carol, dave
        assert "agent:dave" in tree.text and "replied" in tree.text
        dead = await client.get("/dead", params={"ns": ns})
        assert scenario.dead_id in dead.text and "request_dead_lettered" in dead.text
        home = await client.get("/")
        assert "pending · accepted" in home.text and "dead letters" in home.text
        assert (await client.get("/pending", params={"ns": "other"})).status_code == 404
        assert (await client.get("/request", params={"ns": ns, "id": "nope"})).status_code == 404


async def test_hostile_ids_are_inert(redis: Redis, ns: str, scenario: Scenario) -> None:
    async with _client(redis, ns) as client:
        for page in (await client.get("/pending", params={"ns": ns}),
                     await client.get("/request", params={"ns": ns, "id": scenario.hostile_id})):
            assert "<script>" not in page.text and "&lt;script&gt;" in page.text
            assert "\u202e" not in page.text and "\\u202e" in page.text
            assert "\x1b" not in page.text and "\\u001b" in page.text and "\x07" not in page.text
            assert "script-src" not in page.headers["content-security-policy"]
            assert "default-src 'none'" in page.headers["content-security-policy"]
    assert inert(HOSTILE) == ('<script>document.title="pwned"</script>'
                              '\\u202eexe.txt\\u001b[31m\\u0007')
    assert inert("plain agent-1") == "plain agent-1" and inert(None) == ""


async def test_the_console_changes_nothing(redis: Redis, ns: str, scenario: Scenario) -> None:
    before = {key: await redis.type(key) for key in await redis.keys(f"sos:{{{ns}}}:*")}
    lengths = {key: await redis.xlen(key) for key, kind in before.items() if kind == b"stream"}
    async with _client(redis, ns) as client:
        for path in ("/", "/pending", "/request", "/trace", "/dead"):
            params = {"ns": ns, "id": scenario.dead_id}
            assert (await client.get(path, params=params)).status_code == 200
            assert (await client.post(path, params=params)).status_code == 405
    after = {key: await redis.type(key) for key in await redis.keys(f"sos:{{{ns}}}:*")}
    assert after == before
    assert {key: await redis.xlen(key) for key in lengths} == lengths


async def test_token_is_required_when_set(redis: Redis, ns: str, scenario: Scenario) -> None:
    async with _client(redis, ns, token="s3cret") as client:
        assert (await client.get("/pending", params={"ns": ns})).status_code == 401
        wrong = await client.get("/pending", headers={"Authorization": "Bearer nope"})
        assert wrong.status_code == 401
        ok = await client.get("/pending", headers={"Authorization": "Bearer s3cret"})
        assert ok.status_code == 200
        login = await client.get("/pending", params={"ns": ns, "token": "s3cret"})
        assert login.status_code == 303 and "token" not in login.headers["location"]
        assert (await client.get(login.headers["location"])).status_code == 200  # the cookie


def _sample(text: str, metric: str, *labels: str) -> float | None:
    """The value of the exposition line of ``metric`` carrying every label in ``labels``."""
    for line in text.splitlines():
        name, _, rest = line.partition("{")
        if name == metric and all(label in rest for label in labels):
            return float(line.rsplit(" ", 1)[1])
    return None


async def test_metrics_endpoint_serves_the_gauges(sdk: Sdk, redis: Redis, ns: str,
                                                  scenario: Scenario) -> None:
    # sdk first: measurements made before a meter provider is set are lost
    async with _client(redis, ns, metrics=True) as client:
        text = (await client.get("/metrics")).text
    mine = f'sharedos_namespace="{ns}"'
    assert _sample(text, "sharedos_pending", mine, 'sharedos_state="accepted"') == 2
    assert _sample(text, "sharedos_pending", mine, 'sharedos_state="running"') == 0
    assert _sample(text, "sharedos_dead_letters", mine) == 1
    assert _sample(text, "sharedos_outbox_depth", mine) == 3
    replied = _sample(text, "sharedos_requests_total", mine, 'sharedos_code="replied"')
    assert replied == 3  # bob's and alice's two requests in the scenario
