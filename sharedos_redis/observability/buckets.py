"""Outcome codes → denial buckets, so dashboards count refusals apart (ADRs 0009/0020/0025).

Infrastructure fail-closed denials, policy denials, escalations and route refusals
are counted apart from authorization denials; failures that refuse nothing (a
timeout, a failed recipient turn) are ``failure``; a validated reply is ``none``.
Pure: imports nothing of ours but the reason vocabulary.
"""

from __future__ import annotations

from typing import Final, Literal

from ..kernel.reasons import REASON_CODES

__all__ = ["BUCKETS", "Bucket", "bucket_of"]

Bucket = Literal["none", "authorization", "infrastructure", "policy", "escalation", "route",
                 "failure"]
BUCKETS: Final[tuple[Bucket, ...]] = ("none", "authorization", "infrastructure", "policy",
                                      "escalation", "route", "failure")

_TABLE: Final[dict[str, Bucket]] = {
    # authorization: no grant, or a grant that does not reach (the recipient's admission too)
    **dict.fromkeys(("no_matching_grant", "grant_exhausted", "invalid_context",
                     "invalid_request", "delegation_chain_invalid",
                     "delegation_chain_unverified", "recipient_turn_denied", "actor_mismatch",
                     "receiver_mismatch", "message_context_mismatch", "trace_mismatch",
                     # the kernel reports a tool the actor may not use as unavailable
                     "tool_unavailable"),
                    "authorization"),
    # infrastructure fail-closed: a store the decision needs did not answer
    **dict.fromkeys(("usage_store_unavailable", "authority_unavailable", "audit_unavailable",
                     "store_unavailable", "message_delivery_failed"), "infrastructure"),
    # host policy: limits the host sets, whatever the grants say
    **dict.fromkeys(("host_policy_denied", "budget_exhausted", "payload_too_large",
                     "tool_call_limit_exceeded", "step_limit_exceeded", "duplicate_message"),
                    "policy"),
    # route: nowhere to deliver (no such recipient, no transport, no live route lease);
    # never counted as an authorization denial (ADR 0025)
    **dict.fromkeys(("recipient_unknown", "message_transport_not_configured",
                     "route_unavailable", "route_not_agent"), "route"),
}


def bucket_of(code: str | None) -> Bucket:
    """The bucket of outcome ``code`` (``None`` or ``replied``: ``none``).

    No code of the current vocabulary is an escalation (``ExecutionResult`` has no
    ``escalated`` status yet); the bucket exists so dashboards need no change later.
    """
    if code is None or code == "replied":
        return "none"
    if code == "escalated":
        return "escalation"
    return _TABLE.get(code, "failure") if code in REASON_CODES else "failure"
