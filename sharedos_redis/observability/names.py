"""Stable names: span names, attribute keys and metric instrument names.

Dashboards and alerts depend on these; change one only with a migration note.
Prometheus spells a metric with ``_`` for ``.``, a unit suffix and ``_total`` on
counters (``sharedos.requests`` → ``sharedos_requests_total``).
"""

from __future__ import annotations

from typing import Final

__all__ = [
    "ACTION", "ATTEMPT", "BUCKET", "BUDGET_EXHAUSTED", "CATALOG_HASH", "CODE", "DEAD_LETTERS",
    "DENIALS", "MESSAGE_ID", "METRICS", "NAMESPACE", "OUTBOX_AGE", "OUTBOX_DEPTH", "OUTCOME",
    "PENDING", "PURPOSE",
    "RECIPIENT", "RECONCILER_ACTIONS", "RELAY_LAG", "REQUESTS", "REQUEST_DURATION", "SENDER",
    "SPAN_ACCEPT", "SPAN_DISPATCH", "SPAN_REQUEST", "SPAN_SETTLE", "SPAN_TOOL", "SPAN_TURN",
    "STATE", "STATUS", "TOOL", "TOOL_CALLS", "TRACE_ID", "TURN_DURATION", "WORKERS",
]

SPAN_REQUEST: Final = "messages.request"   # the requester: authorization to validated reply
SPAN_ACCEPT: Final = "sharedos.accept"     # the durable write (accept script)
SPAN_DISPATCH: Final = "sharedos.dispatch"  # the relay waking the recipient
SPAN_TURN: Final = "sharedos.turn"         # one recipient turn attempt (or a root turn)
SPAN_TOOL: Final = "sharedos.tool"         # one tool call other than messages.request
SPAN_SETTLE: Final = "sharedos.settle"     # the recipient's reply or failure settlement

NAMESPACE: Final = "sharedos.namespace"
SENDER: Final = "sharedos.sender"          # "<kind>:<id>", e.g. "agent:bob"
RECIPIENT: Final = "sharedos.recipient"
PURPOSE: Final = "sharedos.purpose"
MESSAGE_ID: Final = "sharedos.message_id"
TRACE_ID: Final = "sharedos.trace_id"      # the SharedOS trace (loop budget), not OTel's
OUTCOME: Final = "sharedos.outcome"        # succeeded | denied | failed
CODE: Final = "sharedos.code"              # replied or a closed reason code
BUCKET: Final = "sharedos.denial_bucket"   # see buckets.py
ATTEMPT: Final = "sharedos.attempt"
CATALOG_HASH: Final = "sharedos.catalog_hash"
TOOL: Final = "sharedos.tool"
STATUS: Final = "sharedos.status"
STATE: Final = "sharedos.state"
ACTION: Final = "sharedos.action"

REQUESTS: Final = "sharedos.requests"
REQUEST_DURATION: Final = "sharedos.request.duration"
DENIALS: Final = "sharedos.denials"
BUDGET_EXHAUSTED: Final = "sharedos.budget.exhausted"
TURN_DURATION: Final = "sharedos.turn.duration"
TOOL_CALLS: Final = "sharedos.tool.calls"
RELAY_LAG: Final = "sharedos.relay.lag"
RECONCILER_ACTIONS: Final = "sharedos.reconciler.actions"
PENDING: Final = "sharedos.pending"
DEAD_LETTERS: Final = "sharedos.dead_letters"
OUTBOX_DEPTH: Final = "sharedos.outbox.depth"
OUTBOX_AGE: Final = "sharedos.outbox.age"
WORKERS: Final = "sharedos.workers"

METRICS: Final = (REQUESTS, REQUEST_DURATION, DENIALS, BUDGET_EXHAUSTED, TURN_DURATION,
                  TOOL_CALLS, RELAY_LAG, RECONCILER_ACTIONS, PENDING, DEAD_LETTERS,
                  OUTBOX_DEPTH, OUTBOX_AGE, WORKERS)
