"""OpenTelemetry hooks: spans and metrics through ``opentelemetry-api`` only.

Imported by :func:`~sharedos_redis.observability.hooks.configure` when the API is
installed. Spans carry the stable attributes of :mod:`.names` and never a payload,
tool arguments, a tool result or exception text: exceptions are not recorded
(``record_exception=False``) and an error status names the exception's type only.
Trace context crosses processes as the W3C ``traceparent`` the host stores in the
request record at accept (never in the SharedOS envelope, which stays strict).
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Iterable, Iterator, Mapping
from contextlib import AbstractContextManager, contextmanager
from typing import TYPE_CHECKING, Any

from opentelemetry import metrics, trace
from opentelemetry.context import Context
from opentelemetry.trace import SpanKind, Status, StatusCode
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from ..kernel.contracts import AccessContext, MessageEnvelope, ToolCall, ToolDefinition
from ..kernel.messaging import MESSAGES_REQUEST
from . import names as n
from .buckets import bucket_of
from .hooks import SpanHandle, Telemetry

if TYPE_CHECKING:
    from ..kernel.contracts import ToolResult
    from ..kernel.kernel import Kernel

__all__ = ["OtelTelemetry", "catalog_hash", "outcome_code"]

_W3C = TraceContextTextMapPropagator()  # traceparent (+ tracestate) only: never baggage


def _address(address: Any) -> str:
    return f"{address.kind}:{address.id}"


_CATALOGS: dict[tuple[int, ...], tuple[tuple[ToolDefinition, ...], str]] = {}


def catalog_hash(tools: Iterable[ToolDefinition]) -> str:
    """``sha256:<hex>`` of the turn's tool catalogue (canonical JSON, sorted by name).

    Cached by the definitions' identity (frozen models; the cache keeps them alive,
    so an id is never reused while it is a key): a host offers the same objects
    every turn.
    """
    catalog = tuple(tools)
    key = tuple(map(id, catalog))
    cached = _CATALOGS.get(key)
    if cached is not None:
        return cached[1]
    wire = sorted((tool.to_wire() for tool in catalog), key=lambda item: str(item["name"]))
    text = json.dumps(wire, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    digest = "sha256:" + hashlib.sha256(text.encode("utf-8")).hexdigest()
    if len(_CATALOGS) >= 256:
        _CATALOGS.clear()
    _CATALOGS[key] = (catalog, digest)
    return digest


def outcome_code(result: ToolResult) -> str:
    """The closed outcome code of a tool result: ``replied``/``succeeded`` or a reason code.

    For ``messages.request`` the router's outcome (``details.outcome``) or the
    delivery refusal (``details.code``) is more precise than the tool's own code.
    """
    error = getattr(result, "error", None)
    if error is None:
        return "succeeded"
    details = error.details if isinstance(error.details, dict) else {}
    for key in ("outcome", "code"):
        value = details.get(key)
        if isinstance(value, str):
            return value
    return str(error.code)


class _Handle(SpanHandle):
    __slots__ = ("code", "span")

    def __init__(self, span: trace.Span) -> None:
        self.span, self.code = span, "succeeded"

    def outcome(self, code: str) -> None:
        self.code = code
        self.span.set_attribute(n.CODE, code)


class OtelTelemetry(Telemetry):
    """Spans and metrics through the OpenTelemetry API (no-op until an SDK is installed)."""

    enabled = True

    def __init__(self) -> None:
        self._tracer = trace.get_tracer("sharedos_redis")
        meter = metrics.get_meter("sharedos_redis")
        self._requests = meter.create_counter(
            n.REQUESTS, unit="{request}", description="messages.request calls by outcome code")
        self._request_s = meter.create_histogram(
            n.REQUEST_DURATION, unit="s", description="messages.request: authorization to reply")
        self._denials = meter.create_counter(
            n.DENIALS, unit="{request}", description="refused requests by denial bucket")
        self._budget = meter.create_counter(
            n.BUDGET_EXHAUSTED, unit="{request}", description="requests refused for budget")
        self._turn_s = meter.create_histogram(
            n.TURN_DURATION, unit="s", description="recipient turns (one attempt) by outcome")
        self._tools = meter.create_counter(
            n.TOOL_CALLS, unit="{call}", description="tool calls by tool and status")
        self._relay_lag = meter.create_histogram(
            n.RELAY_LAG, unit="s", description="outbox entry age when the relay takes it")
        self._reconciler = meter.create_counter(
            n.RECONCILER_ACTIONS, unit="{request}", description="requests the reconciler acted on")

    @contextmanager
    def _span(self, name: str, attributes: dict[str, Any], *, context: Context | None = None,
              kind: SpanKind = SpanKind.INTERNAL) -> Iterator[_Handle]:
        with self._tracer.start_as_current_span(
                name, context=context, kind=kind, attributes=attributes,
                record_exception=False, set_status_on_exception=False) as span:
            handle = _Handle(span)
            try:
                yield handle
            except BaseException as exc:
                # the type only: an exception's text may carry arguments or credentials
                span.set_status(Status(StatusCode.ERROR, type(exc).__name__))
                raise

    def traceparent(self) -> str:
        carrier: dict[str, str] = {}
        _W3C.inject(carrier)
        return carrier.get("traceparent", "")

    def instrument_kernel(self, kernel: Kernel) -> None:
        invoke = kernel.invoke_tool

        async def invoke_tool(context: AccessContext, call: ToolCall | Mapping[str, Any],
                              **options: Any) -> ToolResult:
            # options (within_turn) pass through untouched: the wrapper only observes
            tool = call.tool if isinstance(call, ToolCall) else str(call.get("tool", ""))
            if tool == MESSAGES_REQUEST:
                return await self._request(invoke, context, call, **options)
            attrs = {n.NAMESPACE: context.namespace_id, n.SENDER: _address(context.actor),
                     n.TOOL: tool, n.TRACE_ID: context.trace_id}
            with self._span(n.SPAN_TOOL, attrs) as span:
                result = await invoke(context, call, **options)
                span.outcome(outcome_code(result))
            self._tools.add(1, {n.NAMESPACE: context.namespace_id, n.TOOL: tool,
                                n.STATUS: result.status})
            return result

        # an instance attribute shadows the method: the kernel itself stays uninstrumented
        setattr(kernel, "invoke_tool", invoke_tool)  # noqa: B010 - mypy forbids method-assign

    async def _request(self, invoke: Any, context: AccessContext,
                       call: ToolCall | Mapping[str, Any], **options: Any) -> ToolResult:
        attrs = {n.NAMESPACE: context.namespace_id, n.SENDER: _address(context.actor),
                 n.PURPOSE: context.purpose, n.TRACE_ID: context.trace_id,
                 n.TOOL: MESSAGES_REQUEST}
        started = time.perf_counter()
        with self._span(n.SPAN_REQUEST, attrs, kind=SpanKind.PRODUCER) as span:
            result: ToolResult = await invoke(context, call, **options)
            code = "replied" if result.status == "succeeded" else outcome_code(result)
            bucket = bucket_of(code)
            span.outcome(code)
            span.span.set_attribute(n.OUTCOME, result.status)
            span.span.set_attribute(n.BUCKET, bucket)
        labels = {n.NAMESPACE: context.namespace_id, n.OUTCOME: result.status, n.CODE: code,
                  n.BUCKET: bucket}
        self._requests.add(1, labels)
        self._request_s.record(time.perf_counter() - started,
                               {n.NAMESPACE: context.namespace_id, n.OUTCOME: result.status})
        if bucket not in ("none", "failure"):
            self._denials.add(1, {n.NAMESPACE: context.namespace_id, n.BUCKET: bucket,
                                  n.CODE: code})
        if code == "budget_exhausted":
            self._budget.add(1, {n.NAMESPACE: context.namespace_id})
        return result

    def accept_span(self, context: AccessContext,
                    envelope: MessageEnvelope) -> AbstractContextManager[SpanHandle]:
        parent = trace.get_current_span()
        ids = {n.MESSAGE_ID: envelope.id, n.RECIPIENT: _address(envelope.receiver)}
        if parent.is_recording():  # the messages.request span learns the trusted ids too
            parent.set_attributes(ids)
        return self._span(n.SPAN_ACCEPT, {
            n.NAMESPACE: context.namespace_id, n.SENDER: _address(envelope.sender),
            n.PURPOSE: envelope.purpose, n.TRACE_ID: envelope.trace_id, **ids})

    def dispatch_span(self, namespace: str, message_id: str | None, entry_id: str,
                      traceparent: str | None) -> AbstractContextManager[SpanHandle]:
        try:
            lag_s = max(0.0, time.time() - int(entry_id.split("-", 1)[0]) / 1000)
            self._relay_lag.record(lag_s, {n.NAMESPACE: namespace})
        except ValueError:  # not a stream id: no lag to record
            pass
        attrs = {n.NAMESPACE: namespace, n.MESSAGE_ID: message_id or ""}
        return self._span(n.SPAN_DISPATCH, attrs, context=_parent(traceparent),
                          kind=SpanKind.CONSUMER)

    @contextmanager
    def turn_span(self, namespace: str, request: MessageEnvelope, *, attempt: int,
                  traceparent: str | None,
                  tools: Iterable[ToolDefinition] = ()) -> Iterator[SpanHandle]:
        attrs = {n.NAMESPACE: namespace, n.SENDER: _address(request.sender),
                 n.RECIPIENT: _address(request.receiver), n.PURPOSE: request.purpose,
                 n.MESSAGE_ID: request.id, n.TRACE_ID: request.trace_id, n.ATTEMPT: attempt,
                 n.CATALOG_HASH: catalog_hash(tools)}
        started = time.perf_counter()
        kind = SpanKind.CONSUMER if traceparent else SpanKind.INTERNAL
        with self._span(n.SPAN_TURN, attrs, context=_parent(traceparent), kind=kind) as span:
            try:
                yield span
            finally:
                self._turn_s.record(time.perf_counter() - started,
                                    {n.NAMESPACE: namespace, n.CODE: span.code})

    def settle_span(self, namespace: str,
                    request: MessageEnvelope) -> AbstractContextManager[SpanHandle]:
        return self._span(n.SPAN_SETTLE, {n.NAMESPACE: namespace, n.MESSAGE_ID: request.id,
                                          n.TRACE_ID: request.trace_id})

    def reconciled(self, namespace: str, counts: Mapping[str, int]) -> None:
        for action, count in counts.items():
            if count:
                self._reconciler.add(count, {n.NAMESPACE: namespace, n.ACTION: action})


def _parent(traceparent: str | None) -> Context | None:
    """The remote parent named by a stored ``traceparent`` (None: the current context)."""
    if not traceparent:
        return None
    return _W3C.extract({"traceparent": traceparent})
