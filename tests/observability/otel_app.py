"""A traced host for worker processes: ``--app tests.observability.otel_app:host``.

bob → alice → carol. alice asks carol; carol calls ``files.carol`` (allowed) and
``files.boom`` (its handler raises with a secret in the text) and answers. The
worker process exports its spans to ``TEST_SPANS_FILE`` (JSON lines).
Configured by SHAREDOS_REDIS_URL, SHAREDOS_NAMESPACE, TEST_SPANS_FILE.
"""

from __future__ import annotations

import os

from opentelemetry import trace
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from redis.asyncio import Redis

from sharedos_redis.kernel.contracts import AccessContext, JsonValue, ToolCall
from sharedos_redis.kernel.turn import RuntimeHost, TurnRequest
from sharedos_redis.store.client import RedisSettings, create_redis
from sharedos_redis.worker.host import MessagingHost

from ..worker.helpers import ask, make_host, read_file_handler, tool
from .span_files import JsonLinesSpanExporter

SECRET_QUESTION = "SECRET-QUESTION-6f1d"   # bob's payload to alice
SECRET_ANSWER = "SECRET-ANSWER-93c2"       # carol's reply payload
SECRET_FAILURE = "SECRET-EXCEPTION-1a7e"   # the text of an exception a tool raises


async def _boom(context: AccessContext, call: ToolCall) -> JsonValue:
    raise RuntimeError(f"{SECRET_FAILURE} password=hunter2")


async def _carol(turn: TurnRequest, host: RuntimeHost) -> JsonValue:
    await host.call("files.carol", {"path": SECRET_QUESTION})
    await host.call("files.boom", {})
    return {"answer": SECRET_ANSWER}


def build(redis: Redis, ns: str, *, url: str | None = None) -> MessagingHost:
    scripts = {"bob": ask("alice", {"question": SECRET_QUESTION}),
               "alice": ask("carol", {"question": SECRET_QUESTION}), "carol": _carol}
    host = make_host(redis, ns, scripts, request_timeout_s=20, turn_timeout_s=15)
    host.connection = RedisSettings.from_url(url) if url else None
    host.register_tool(tool("files.carol", "files", ("carol",)), read_file_handler)
    host.register_tool(tool("files.boom", "files", ("carol",)), _boom)
    return host


def host() -> MessagingHost:
    provider = TracerProvider(resource=Resource.create({"service.name": "worker"}))
    provider.add_span_processor(SimpleSpanProcessor(
        JsonLinesSpanExporter(os.environ["TEST_SPANS_FILE"])))
    trace.set_tracer_provider(provider)
    url = os.environ["SHAREDOS_REDIS_URL"]
    return build(create_redis(RedisSettings(url=url)), os.environ["SHAREDOS_NAMESPACE"], url=url)
