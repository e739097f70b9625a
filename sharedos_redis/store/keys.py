"""Every Redis key and channel of sharedos-redis, formatted in one place.

All keys of one namespace share the hash tag ``{<ns>}`` so one Lua script can
touch them atomically and a Redis Cluster keeps a namespace on one slot.
Identifiers are percent-encoded (UTF-8, only ``A-Za-z0-9-._~`` kept) so no id
containing ``{``, ``}``, ``:``, ``*``, ``%``, spaces or anything else can name
another key: the encoding is injective and its output never holds ``{``, ``}``
or ``:``.

Key (type) — owner — lifetime:

- ``sos:{ns}:msg:<id>`` (hash) — transport/router/worker — the request: its
  envelope and its pending marker (see ``MARKER_FIELDS``). PEXPIREAT deadline +
  grace while open; PEXPIRE ``retention`` once terminal. Holds the reply or the
  failure code once settled.
- ``sos:{ns}:outbox`` (stream, consumer group ``relay``) — transport/relay —
  one entry ``{id[, tp]}`` per accepted request (``tp``: the traceparent); XACK +
  XDEL once dispatched, so it only ever holds undispatched entries.
- ``sos:{ns}:open`` (sorted set, score = deadline ms) — every non-terminal
  request; the reconciler expires from it, ``pending()`` lists from it.
- ``sos:{ns}:leases`` (sorted set, score = lease expiry ms) — running turns.
- ``sos:{ns}:settled`` (stream, MAXLEN ~) — one entry per settlement
  ``{id, state[, result]}``; the per-process reply listener reads it. ``state`` is a
  terminal state, or ``expired`` (result ``request_expired``) for a record that
  vanished while open and was removed from the indexes; ``result`` is the failure
  code (a reply is stored once, in the marker: the entry only wakes its waiter).
- ``sos:{ns}:trace:<trace>`` (sorted set id → accept time ms) — transport — every
  request of a trace (the delegation tree's index; parents are the records'
  ``parent`` fields); PEXPIRE ``budget_ttl`` like the budget.
- ``sos:{ns}:agents`` (hash agent id → route lease expiry ms) — worker — the agent
  directory: the agents some live worker serves (host routing state, never authority).
- ``sos:{ns}:budget:<trace>`` (string int) — hops left for a trace; PEXPIRE
  ``budget_ttl``.
- ``sos:{ns}:grants:<subject kind>:<subject id>`` (hash grant id → grant JSON) — grant store.
- ``sos:{ns}:grant-ids`` (hash grant id → subject tag) — grant store: a grant id
  names one grant of one subject in a namespace, forever (no TTL).
- ``sos:{ns}:revocations`` (hash grant id → revoked-from epoch ms; the field ``""``,
  never a grant id, holds the revision: incremented by every recorded revocation) —
  grant store: retained revocations, read per decision by live revocation with one
  HMGET (no TTL).
- ``sos:{ns}:policy:deny`` (set of ``<resource namespace>:<action>``) — host policy:
  deny rules of the host ceiling, set by an operator (no TTL; empty by default).
- ``sos:{ns}:usage`` (hash grant id → uses spent) — usage store.
- ``sos:{ns}:audit`` (stream, MAXLEN ~) — audit sink.
- ``sos:{ns}:dead`` (stream, MAXLEN ~) — dead letters ``{id, reason, at}``; reason
  ``request_dead_lettered`` (max attempts) or ``request_expired`` (record vanished).
- ``sos:{ns}:rewake:<id>:<tag>`` (string) — stream worker — one re-wake of a
  request already appended to the outbox (reconcilers racing in one lease period
  append one entry); PEXPIRE one lease period.
- ``sos:{ns}:arq:queue`` (sorted set) and ``sos:{ns}:arq:queue:health-check`` (string)
  — the namespace's own arq queue and worker health line; arq's per-job keys are
  ``arq:<kind>:`` + :meth:`Keys.job_id`, so they carry the namespace's hash tag and
  one ACL pattern ``~arq:*:sos:{ns}:*`` covers them (see the README's ACL rule).
"""

from __future__ import annotations

from typing import Final
from urllib.parse import quote, unquote

__all__ = [
    "MARKER_FIELDS",
    "OPEN_STATES",
    "RELAY_GROUP",
    "STATES",
    "TERMINAL_STATES",
    "Keys",
    "address_tag",
    "decode_id",
    "encode_id",
]

RELAY_GROUP: Final = "relay"

STATES: Final = ("accepted", "dispatched", "running", "replied", "failed", "timed_out",
                 "cancelled", "dead")
OPEN_STATES: Final = frozenset({"accepted", "dispatched", "running"})
TERMINAL_STATES: Final = frozenset(STATES) - OPEN_STATES

MARKER_FIELDS: Final = (
    "env",       # the request envelope, wire JSON
    "ctx",       # the requester's AccessContext, wire JSON (for attribution of host events)
    "state",     # one of STATES
    "from",      # requester address, "<kind>:<encoded id>"
    "to",        # recipient address, "<kind>:<encoded id>"
    "purpose",   # the request purpose
    "trace",     # the trace id
    "created",   # accept time, ms since epoch
    "deadline",  # ms since epoch
    "attempts",  # turns started so far
    "updated",   # last transition, ms
    "lease",     # running: lease expiry, ms
    "reply",     # replied: the reply envelope, wire JSON
    "code",      # failed/timed_out/cancelled/dead: the reason code
    "tp",        # W3C traceparent of the requester's span (host-owned; absent untraced)
    "parent",    # the request whose turn made this one (absent for a root request)
    "fp",        # replay fingerprint: sha256 of the call (recipient, purpose, payload)
)


def encode_id(value: str) -> str:
    """Percent-encode an identifier for use inside a key (injective, no ``{}:``)."""
    return quote(value, safe="-._~")


def decode_id(value: str) -> str:
    """Inverse of :func:`encode_id`."""
    return unquote(value)


def address_tag(kind: str, ident: str) -> str:
    """The marker's ``from``/``to`` form of an address: ``"<kind>:<encoded id>"``."""
    return f"{kind}:{encode_id(ident)}"


class Keys:
    """The keys of one namespace. Cheap to build; build one per namespace and reuse it."""

    __slots__ = ("namespace", "prefix")

    def __init__(self, namespace: str) -> None:
        self.namespace = namespace
        self.prefix = f"sos:{{{encode_id(namespace)}}}:"

    def message(self, message_id: str) -> str:
        """Hash: the request envelope and its pending marker."""
        return f"{self.prefix}msg:{encode_id(message_id)}"

    @property
    def outbox(self) -> str:
        """Stream: accepted, not yet dispatched requests."""
        return f"{self.prefix}outbox"

    @property
    def open(self) -> str:
        """Sorted set: open requests by deadline."""
        return f"{self.prefix}open"

    @property
    def leases(self) -> str:
        """Sorted set: running turns by lease expiry."""
        return f"{self.prefix}leases"

    @property
    def settled(self) -> str:
        """Stream: settlements, read by reply listeners."""
        return f"{self.prefix}settled"

    def trace(self, trace_id: str) -> str:
        """Sorted set: every request of one trace (id → accept time ms)."""
        return f"{self.prefix}trace:{encode_id(trace_id)}"

    @property
    def agents(self) -> str:
        """Hash: the agent directory (agent id → route lease expiry ms)."""
        return f"{self.prefix}agents"

    def budget(self, trace_id: str) -> str:
        """String: hops left for one trace."""
        return f"{self.prefix}budget:{encode_id(trace_id)}"

    def grants(self, subject_kind: str, subject_id: str) -> str:
        """Hash: grant id → grant JSON for one subject."""
        return f"{self.prefix}grants:{encode_id(subject_kind)}:{encode_id(subject_id)}"

    @property
    def grant_ids(self) -> str:
        """Hash: grant id → subject tag (ids are unique per namespace)."""
        return f"{self.prefix}grant-ids"

    @property
    def revocations(self) -> str:
        """Hash: grant id → revoked-from epoch ms (kept forever); field ``""``: the revision."""
        return f"{self.prefix}revocations"

    @property
    def policy_deny(self) -> str:
        """Set: the host ceiling's deny rules ``<resource namespace>:<action>``."""
        return f"{self.prefix}policy:deny"

    @property
    def usage(self) -> str:
        """Hash: grant id → uses spent."""
        return f"{self.prefix}usage"

    @property
    def audit(self) -> str:
        """Stream: the namespace's audit records."""
        return f"{self.prefix}audit"

    @property
    def arq_queue(self) -> str:
        """Sorted set: this namespace's arq queue (a worker takes only its own jobs)."""
        return f"{self.prefix}arq:queue"

    def job_id(self, message_id: str, suffix: str = "") -> str:
        """The arq job id of a request's turn (``suffix`` distinguishes re-wakes)."""
        return f"{self.prefix}turn:{encode_id(message_id)}{suffix}"

    @property
    def dead(self) -> str:
        """Stream: dead letters."""
        return f"{self.prefix}dead"

    def rewake(self, message_id: str, tag: str) -> str:
        """String: marks one re-wake of a request as published (stream worker dedup)."""
        return f"{self.prefix}rewake:{encode_id(message_id)}:{encode_id(tag)}"
