"""A requester process: ``python -m tests.faults.requester send|check <message-id>``.

``send`` makes one ``messages.request`` from ``req`` to ``alice`` through
``Kernel.invoke_tool`` and prints the outcome as one JSON line (``nested``: the same,
and alice's turn asks ``carol`` before it answers); ``check`` is a
restarted requester: it reads the request back from its marker by message id,
waits for its settlement with ``router.resolve_reply`` and re-validates the reply
like the kernel does. Environment: SHAREDOS_REDIS_URL, SHAREDOS_NAMESPACE and,
for fault runs, SHAREDOS_FAULT.
"""

from __future__ import annotations

import json
import os
import sys
import uuid
from typing import Any

import anyio

from sharedos_redis.errors import RequestOutcomeError, SharedOSError
from sharedos_redis.kernel.contracts import (
    DeliveryAccepted,
    JsonValue,
    MessageEnvelope,
    ToolCall,
    ToolResult,
    format_timestamp,
)
from sharedos_redis.kernel.replies import check_reply
from sharedos_redis.store.client import RedisSettings, create_redis
from sharedos_redis.worker.host import MessagingHost

from .fault_app import NESTED, PURPOSE, REQUESTER, build

__all__ = ["ask", "main", "recheck", "result_json"]


async def ask(host: MessagingHost, recipient: str, payload: JsonValue, *,
              sender: str = REQUESTER, trace_id: str | None = None) -> ToolResult:
    """One ``messages.request`` of ``sender`` to agent ``recipient`` via the kernel."""
    trace = trace_id or f"trace-{uuid.uuid4().hex[:12]}"
    context = host.context_for(sender, purpose=PURPOSE, trace_id=trace)
    call = ToolCall.from_wire({
        "id": f"call-{uuid.uuid4().hex[:12]}", "tool": "messages.request",
        "arguments": {"recipient": {"kind": "agent", "agentId": recipient}, "payload": payload},
        "traceId": trace, "requestedAt": format_timestamp()})
    return await host.kernel.invoke_tool(context, call)


def result_json(result: ToolResult) -> dict[str, Any]:
    """The outcome line of a tool result: status, output or error code and details."""
    wire = result.to_wire()
    error = wire.get("error") or {}
    return {"status": wire["status"], "output": wire.get("output"),
            "code": error.get("code"), "details": error.get("details"),
            "message_id": (wire.get("metadata") or {}).get("messageId")}


async def recheck(host: MessagingHost, message_id: str) -> dict[str, Any]:
    """What a restarted requester learns about ``message_id`` (waits for its settlement)."""
    env, = await host.markers.fields(host.namespace, message_id, ("env",))
    if env is None:
        return {"status": "unknown", "message_id": message_id}
    request = MessageEnvelope.from_json(env)
    context = host.context_for(request.sender.id, purpose=request.purpose,
                               trace_id=request.trace_id)
    receipt = DeliveryAccepted(message_id=message_id, timestamp=format_timestamp())
    try:
        raw = await host.router.resolve_reply(context, request, receipt)
    except RequestOutcomeError as exc:
        return {"status": "failed", "code": exc.code, "message_id": message_id}
    reply, problem = check_reply(request, raw)
    if reply is None:
        return {"status": "failed", "code": "invalid_message_reply", "details": problem,
                "message_id": message_id}
    return {"status": "succeeded", "output": reply.payload, "message_id": message_id}


async def _main(mode: str, message_id: str | None) -> dict[str, Any]:
    url = os.environ["SHAREDOS_REDIS_URL"]
    host = build(create_redis(RedisSettings(url=url)), os.environ["SHAREDOS_NAMESPACE"], url=url)
    try:
        async with host:
            with anyio.fail_after(40):
                if mode == "check" and message_id:
                    return await recheck(host, message_id)
                payload: JsonValue = {"q": "status?"}
                if mode == "nested":
                    payload = {"q": "status?", "via": NESTED}
                return result_json(await ask(host, "alice", payload))
    finally:
        await host.redis.aclose()


def main(argv: list[str]) -> int:
    """Run one mode, print its JSON line; exit 0, or 1 on a store failure."""
    mode = argv[0] if argv else "send"
    try:
        outcome = anyio.run(_main, mode, argv[1] if len(argv) > 1 else None)
    except (SharedOSError, TimeoutError) as exc:
        print(json.dumps({"status": "error", "code": type(exc).__name__}), flush=True)
        return 1
    print(json.dumps(outcome), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
