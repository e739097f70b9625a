"""The drain's retryable rule: which calls count as effects that may not repeat."""

from __future__ import annotations

import pytest

from sharedos_redis.errors import StoreUnavailable
from sharedos_redis.kernel.contracts import (
    MessageEnvelope,
    ToolAnnotations,
    ToolCall,
    agent,
    format_timestamp,
)
from sharedos_redis.kernel.testing import InMemoryTransport
from sharedos_redis.worker.effects import (
    EffectTrackingTransport,
    TurnEffects,
    repeatable,
    tracked_handler,
    tracking,
)

from ..store.store_support import make_context
from .helpers import read_file_handler, tool

pytestmark = pytest.mark.anyio


def _envelope() -> MessageEnvelope:
    return MessageEnvelope(id="m-1", sender=agent("bob"), receiver=agent("alice"),
                           purpose="p", payload={}, trace_id="t-1",
                           created_at=format_timestamp())


def _call() -> ToolCall:
    return ToolCall(id="c-1", tool="x", arguments={}, trace_id="t-1",
                    requested_at=format_timestamp())


async def test_an_accepted_request_is_an_effect_a_denied_one_is_not() -> None:
    context = make_context("ns")
    effects = TurnEffects()
    accepting = EffectTrackingTransport(InMemoryTransport("accept"))
    denying = EffectTrackingTransport(InMemoryTransport("deny", code="budget_exhausted"))
    with tracking(effects):
        await denying.deliver(context, _envelope())
        assert effects.retryable
        await accepting.deliver(context, _envelope())
    assert not effects.retryable and effects.entered == 1
    await accepting.deliver(context, _envelope())  # outside a turn: nothing to count
    assert effects.entered == 1


async def test_a_failing_delivery_counts_because_the_accept_may_have_landed() -> None:
    effects = TurnEffects()
    with tracking(effects), pytest.raises(StoreUnavailable):
        await EffectTrackingTransport(InMemoryTransport("raise")).deliver(
            make_context("ns"), _envelope())
    assert not effects.retryable


async def test_only_non_repeatable_tools_count() -> None:
    read = tool("files.read", "files", ("a",))
    write = read.model_copy(update={"read_write": "write"})
    idempotent = write.model_copy(update={"annotations": ToolAnnotations(idempotent=True)})
    assert repeatable(read) and repeatable(idempotent) and not repeatable(write)
    effects = TurnEffects()
    with tracking(effects):
        await tracked_handler(read, read_file_handler)(make_context("ns"), _call())
        await tracked_handler(idempotent, read_file_handler)(make_context("ns"), _call())
        assert effects.retryable
        await tracked_handler(write, read_file_handler)(make_context("ns"), _call())
    assert effects.entered == 1
