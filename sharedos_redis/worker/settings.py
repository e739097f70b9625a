"""Host and worker settings, validated once at configuration time.

The deadline tree is checked here: a recipient turn must end before its
request's deadline, a nested request is capped to its parent's deadline at
accept time, and arq's job timeout must exceed the longest turn.
"""

from __future__ import annotations

from typing import Self

from pydantic import BaseModel, ConfigDict, Field, model_validator

from ..errors import ConfigurationError
from ..store.limits import (
    AUDIT_MAXLEN,
    DEFAULT_HOPS,
    REQUEST_TIMEOUT_S,
    RETENTION_S,
    ROUTE_CHECK,
    ROUTE_LEASE_S,
)

__all__ = ["HostSettings"]


class HostSettings(BaseModel):
    """Timeouts, retries and concurrency of one messaging host.

    Attributes:
        request_timeout_s: how long a requester waits for a reply (the request deadline).
        turn_timeout_s: the longest a recipient turn may run; must be < request_timeout_s.
        lease_s: how long a running turn's lease lasts without renewal; a worker killed
            mid-turn is detected after this long and the turn re-runs.
        max_attempts: turns started for one request before it is dead-lettered.
        max_jobs: turns *running* at once per worker process. A turn waiting for a
            nested request gives its slot back while it waits, so a delegation chain of
            any depth needs one free slot at a time.
        max_in_flight: turns started and not finished per worker process, running or
            waiting (a memory bound; at least ``max_jobs``).
        poll_delay_s: arq queue poll interval (arq polls; our replies are pushed).
        reconcile_interval_s: how often the reconciler runs.
        claim_idle_s: an outbox entry unacknowledged this long is claimed by another relay.
        default_budget_hops: hops per trace when the host sets none at the root turn.
        retention_s: how long settled requests are kept for inspection.
        audit_maxlen: approximate length the namespace's audit stream is trimmed to.
        direct_dispatch: a worker whose relay wakes a turn while it has a free slot runs
            the turn at once instead of enqueueing an arq job and waiting for the next
            poll (re-wakes after crashes and overflow always go through arq). The stream
            worker (Redis Cluster) always starts turns directly and ignores this and
            ``poll_delay_s``.
        drain_grace_s: on SIGTERM/SIGINT, how long running turns may finish before the
            worker hands them back (or interrupts those that may not run again).
        host_ceiling: install the Redis host ceiling (``store.policy.RedisHostPolicy``):
            operator deny rules that can only narrow an allowed decision
            (``host_policy_denied``), loaded once per turn. Off: the grants are the
            whole policy and no round trip is spent on it.
        max_reply_bytes: the largest reply payload stored (compact UTF-8 JSON); a larger
            reply fails its request ``reply_too_large``. None: the request limit.
        live_revocation: with the Redis grant store, a revocation reaches the next
            decision of a running turn (one HMGET per matching grant, SharedOS
            ADR 0027); off, a turn keeps the grants it was admitted with and a
            revocation reaches the next turn.
        route_lease_s: how long a worker's route lease on the agents it serves (the
            agent directory, ``store.directory``) lasts; a running worker refreshes it
            every third of this. After a worker stops, its agents are unserved (unless
            another worker serves them) this long at most.
        route_check: the accept script refuses a request to a non-agent address
            (``route_not_agent``) or to an agent with no live route lease
            (``route_unavailable``), spending no hop and no use, and the reconciler fails
            open requests to such an agent early. Off: such a request is accepted and
            waits for a worker until its deadline.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    request_timeout_s: float = Field(REQUEST_TIMEOUT_S, gt=0)
    turn_timeout_s: float = Field(45.0, gt=0, le=600)
    lease_s: float = Field(15.0, gt=0)
    max_attempts: int = Field(3, ge=1)
    max_jobs: int = Field(32, ge=1)
    max_in_flight: int = Field(256, ge=1)
    poll_delay_s: float = Field(0.005, gt=0)
    reconcile_interval_s: float = Field(1.0, gt=0)
    claim_idle_s: float = Field(10.0, gt=0)
    default_budget_hops: int = Field(DEFAULT_HOPS, ge=1)
    retention_s: int = Field(RETENTION_S, ge=1)
    audit_maxlen: int = Field(AUDIT_MAXLEN, ge=1000)
    direct_dispatch: bool = True
    drain_grace_s: float = Field(10.0, ge=0)
    live_revocation: bool = True
    max_reply_bytes: int | None = Field(None, gt=0)
    host_ceiling: bool = False
    route_lease_s: float = Field(ROUTE_LEASE_S, gt=0)
    route_check: bool = ROUTE_CHECK

    @model_validator(mode="after")
    def _deadline_tree(self) -> Self:
        if self.turn_timeout_s >= self.request_timeout_s:
            raise ConfigurationError(
                f"turn_timeout_s ({self.turn_timeout_s}) must be below request_timeout_s "
                f"({self.request_timeout_s}): a turn that outlives its request is wasted"
            )
        if self.max_in_flight < self.max_jobs:
            raise ConfigurationError("max_in_flight must be at least max_jobs")
        if self.lease_s > self.request_timeout_s:
            raise ConfigurationError("lease_s must not exceed request_timeout_s")
        return self

    @property
    def job_timeout_s(self) -> float:
        """arq's job timeout: the longest turn plus room to settle its outcome."""
        return self.turn_timeout_s + 10.0

    @classmethod
    def checked(cls, **values: object) -> HostSettings:
        """Build settings, raising :class:`ConfigurationError` for any invalid value."""
        try:
            return cls.model_validate(values)
        except ConfigurationError:
            raise
        except ValueError as exc:
            raise ConfigurationError(str(exc)) from None
