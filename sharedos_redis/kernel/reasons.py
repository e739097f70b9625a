"""The closed vocabulary of reason codes (SharedOS's plus the Redis host's).

A code says *what* was refused or failed; audit ``cause`` says which situation
a coarse code stood for. Never invent a code outside this module.
"""

from __future__ import annotations

from typing import Final, Literal, get_args

__all__ = [
    "AUTHORIZATION_REASONS",
    "HOST_REASONS",
    "MESSAGING_REASONS",
    "REASON_CODES",
    "TURN_REASONS",
    "AuthorizationReason",
    "ReasonCode",
]

AuthorizationReason = Literal[
    "allowed",
    "no_matching_grant",
    "grant_exhausted",
    "usage_store_unavailable",
    "invalid_context",
    "invalid_request",
    "authority_unavailable",
    "audit_unavailable",
    "delegation_chain_invalid",
    "delegation_chain_unverified",
    "host_policy_denied",
    "host_policy_unavailable",
]

MessagingReason = Literal[
    "unsupported_protocol_version",
    "message_context_mismatch",
    "message_transport_not_configured",
    "message_delivery_failed",
    "invalid_message_receipt",
    "trace_mismatch",
    "tool_unavailable",
    "invalid_tool_arguments",
    "invalid_tool_requirement",
    "tool_requirement_resolution_failed",
    "invalid_tool_result",
    "stale_request",
    "tool_failed",
    "message_request_not_accepted",
    "message_reply_resolution_failed",
    "invalid_message_reply",
]

TurnReason = Literal[
    "escalation_requested",
    "actor_mismatch",
    "receiver_mismatch",
    "tool_call_limit_exceeded",
    "step_limit_exceeded",
    "runtime_failed",
    "invalid_runtime_outcome",
    "driver_failed",
    "invalid_driver_decision",
    "turn_cancelled",
]

HostReason = Literal[
    # accept
    "duplicate_message",
    "budget_exhausted",
    "payload_too_large",
    "store_unavailable",
    # reply settlement
    "unknown_request",
    "request_closed",
    "reply_mismatch",
    # request outcomes (what a waiting requester is told)
    "request_timed_out",
    "request_cancelled",
    "request_dead_lettered",
    "request_expired",  # its record expired or was evicted while open
    "recipient_unknown",
    "recipient_turn_denied",
    "recipient_turn_failed",
    "recipient_turn_cancelled",
    "recipient_turn_escalated",
    "recipient_turn_interrupted",
    "reply_too_large",
    # delegation trees (issue 12)
    "route_unavailable",  # no live worker serves the recipient agent (agent directory)
    "route_not_agent",  # the recipient is not an agent address: nothing runs its turns
    "turn_lease_lost",  # a stale attempt's effect, fenced: another attempt holds the turn
    "replay_conflict",  # a re-issued nested call differs from the one recorded (ADR 0028)
    "replay_attached",  # not a refusal: why a re-issued call's reserved use was given back
    "request_cascade_cancelled",  # an ancestor of the request ended first
    "request_deadlocked",
]

ReasonCode = AuthorizationReason | MessagingReason | TurnReason | HostReason

AUTHORIZATION_REASONS: Final = frozenset(get_args(AuthorizationReason))
MESSAGING_REASONS: Final = frozenset(get_args(MessagingReason))
TURN_REASONS: Final = frozenset(get_args(TurnReason))
HOST_REASONS: Final = frozenset(get_args(HostReason))
REASON_CODES: Final = AUTHORIZATION_REASONS | MESSAGING_REASONS | TURN_REASONS | HOST_REASONS
