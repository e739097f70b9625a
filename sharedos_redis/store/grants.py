"""The Redis grant store: the host's trusted ``GrantSource``.

Owns ``RedisGrantStore``. Grants are kept per subject in
``sos:{ns}:grants:<kind>:<id>`` (hash grant id → grant wire JSON), validated on
the way in and on the way out: a corrupt stored grant raises, so the kernel
fails closed (``authority_unavailable``) instead of skipping it. Grants are
durable configuration: the hashes have no TTL; ``revoke`` marks, never deletes.

A grant id names one grant in its namespace, forever: ``put`` refuses an id held
by another subject or ever revoked, so per-grant use counters cannot be shared.
``revoke`` also records the revocation (retained) for the live revocation port,
:meth:`RedisGrantStore.check` (SharedOS ADR 0027): one HMGET of one hash reads the
revocation state of every id asked about and the revision, consistently.
:meth:`RedisGrantStore.grants_checked` reads a subject's grants and that state of
each of them in one script, so a decision that loads the grants needs no second read.
"""

from __future__ import annotations

from collections.abc import Awaitable, Sequence
from functools import lru_cache
from typing import Final, cast

from redis.asyncio import Redis

from ..errors import ConfigurationError, StoreUnavailable
from ..kernel.contracts import Address, CapabilityGrant, timestamp_ms
from ..kernel.ports import CheckedGrants, RevocationCheck
from .boundary import STORE_ERRORS, store_unavailable
from .keys import Keys, address_tag
from .scripts import Scripts

__all__ = ["RedisGrantStore"]

_SWAP_ATTEMPTS: Final = 64
_PARSE_CACHE: Final = 4096


@lru_cache(maxsize=256)
def _keys(namespace_id: str) -> Keys:
    """The namespace's keys (built once: every grant read names one of its keys)."""
    return Keys(namespace_id)


@lru_cache(maxsize=4096)
def _subject_key(namespace_id: str, kind: str, ident: str) -> str:
    return _keys(namespace_id).grants(kind, ident)


def _key(namespace_id: str, subject: Address) -> str:
    return _subject_key(namespace_id, subject.kind, subject.id)


def _text(value: bytes | str | int) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _sort_key(grant: CapabilityGrant) -> tuple[int, str]:
    return timestamp_ms(grant.issued_at), grant.id


def _revocation_check(grant_ids: Sequence[bytes | str], revoked_from: Sequence[bytes | None],
                      revision: bytes | None, at_ms: int) -> RevocationCheck:
    """The ids revoked at ``at_ms`` (revoked-from at or before it) and the revision read."""
    revoked = frozenset(_text(grant_id) for grant_id, raw in zip(grant_ids, revoked_from,
                                                                  strict=True)
                        if raw is not None and int(raw) <= at_ms)
    return RevocationCheck(revision=_text(revision) if revision is not None else "0",
                           revoked=revoked)


class RedisGrantStore:
    """Grants by (namespace, subject); the kernel reads them with ``grants_for``."""

    def __init__(self, redis: Redis) -> None:
        self._redis = redis
        self._parsed: dict[bytes, CapabilityGrant] = {}
        self._scripts = Scripts(redis)

    async def put(self, grant: CapabilityGrant) -> None:
        """Store (or replace) ``grant`` under its namespace and subject.

        Raises:
            ContractError: ``grant`` does not satisfy the contract.
            ConfigurationError: the id belongs to another subject's grant in this
                namespace, or was revoked (ids are never reused).
            StoreUnavailable: Redis failed.
        """
        checked = CapabilityGrant.from_wire(grant.to_wire())
        keys = Keys(checked.namespace_id)
        subject = checked.subject
        stored = int(await self._scripts.call(
            "put_grant", [_key(checked.namespace_id, subject), keys.grant_ids, keys.revocations],
            [checked.id, checked.to_json(), address_tag(subject.kind, subject.id)]))
        if stored == 0:
            raise ConfigurationError(
                f"grant id {checked.id!r} already names another subject's grant")
        if stored < 0:
            raise ConfigurationError(f"grant id {checked.id!r} was revoked; issue a new id")

    async def revoke(self, namespace_id: str, subject: Address, grant_id: str, at: str) -> bool:
        """Mark a grant revoked from ``at`` on (an earlier revocation is kept).

        Returns:
            True when the grant exists (and is now revoked); False when it does not.

        Raises:
            ConfigurationError: ``at`` is not an RFC 3339 timestamp.
            ContractError: the stored grant is corrupt.
            StoreUnavailable: Redis failed, or the grant kept changing under the swap.
        """
        try:
            at_ms = timestamp_ms(at)
        except ValueError as exc:
            raise ConfigurationError(f"revocation time is not RFC 3339: {at!r}") from exc
        key, keys = _key(namespace_id, subject), Keys(namespace_id)
        for _ in range(_SWAP_ATTEMPTS):
            raw = await self._hget(key, grant_id)
            if raw is None:
                return False
            grant = CapabilityGrant.from_json(raw)
            if grant.revoked_at is not None and timestamp_ms(grant.revoked_at) <= at_ms:
                return True
            revoked = CapabilityGrant.from_wire({**grant.to_wire(), "revokedAt": at})
            swapped = int(await self._scripts.call(
                "swap_grant", [key, keys.revocations],
                [grant_id, raw, revoked.to_json(), at_ms]))
            if swapped != 0:
                return swapped == 1
        raise StoreUnavailable("grants.revoke", "the grant kept changing during revocation")

    async def list(self, namespace_id: str, subject: Address) -> list[CapabilityGrant]:
        """Every grant of ``subject`` in the namespace, ordered by (issuedAt, id).

        Raises:
            ContractError: a stored grant is corrupt.
            StoreUnavailable: Redis failed.
        """
        try:
            stored = await cast("Awaitable[list[bytes]]",
                                self._redis.hvals(_key(namespace_id, subject)))
        except STORE_ERRORS as exc:
            raise store_unavailable("grants.list", exc) from exc
        return sorted((self._parse(raw) for raw in stored), key=_sort_key)

    async def grants_checked(self, namespace_id: str, actor: Address, authority: Address,
                             at_ms: int) -> CheckedGrants:
        """``grants_for`` and the live revocation state of every grant of ``actor``, in
        one script (one round trip, one consistent read of both hashes): the kernel's
        ``CheckedGrantSource``, which spares a decision that loads the grants its first
        revocation read (SharedOS ADR 0027, issue 11).

        Raises:
            ContractError: a stored grant is corrupt (the kernel fails closed).
            StoreUnavailable: Redis failed (the kernel fails closed).
        """
        stored, (revision, *revoked_from) = await self._scripts.call(
            "read_grants", [_key(namespace_id, actor), _keys(namespace_id).revocations], [])
        ids = stored[::2]
        grants = sorted((self._parse(raw) for raw in stored[1::2]), key=_sort_key)
        checked = frozenset(_text(grant_id) for grant_id in ids)
        return CheckedGrants(
            grants=[g for g in grants if g.issuer == authority], checked=checked,
            revocations=_revocation_check(ids, revoked_from, revision, at_ms))

    def _parse(self, raw: bytes | str) -> CapabilityGrant:
        """Parse stored grant JSON, remembering recent parses (grants are frozen and a
        changed grant is different JSON, so a cached parse is never stale)."""
        key = raw if isinstance(raw, bytes) else raw.encode()
        grant = self._parsed.get(key)
        if grant is None:
            grant = CapabilityGrant.from_json(raw)
            if len(self._parsed) >= _PARSE_CACHE:
                self._parsed.pop(next(iter(self._parsed)))
            self._parsed[key] = grant
        return grant

    async def grants_for(
        self, namespace_id: str, actor: Address, authority: Address
    ) -> Sequence[CapabilityGrant]:
        """The grants of ``actor`` issued by ``authority`` (the kernel's GrantSource).

        Raises:
            ContractError: a stored grant is corrupt (the kernel fails closed).
            StoreUnavailable: Redis failed (the kernel fails closed).
        """
        return [g for g in await self.list(namespace_id, actor) if g.issuer == authority]

    async def chain(self, namespace_id: str, grant_id: str,
                    limit: int) -> Sequence[CapabilityGrant]:
        """The delegation chain resolver: ``grant_id`` and its ancestors (at most ``limit``),
        read by id in one script.

        Raises:
            ContractError: a stored grant is corrupt (the chain is then unverifiable).
            StoreUnavailable: Redis failed.
        """
        keys = Keys(namespace_id)
        answer = await self._scripts.call("grant_chain", [keys.grant_ids],
                                          [keys.prefix + "grants:", grant_id, limit])
        return [self._parse(raw) for raw in answer]

    async def check(self, namespace_id: str, grant_ids: Sequence[str],
                    at_ms: int) -> RevocationCheck:
        """The live revocation port: which of ``grant_ids`` are revoked at ``at_ms``.

        One HMGET reads the revision (field ``""``) and every id together (one key:
        consistent), on the namespace's primary: a failure raises and the kernel fails
        closed.

        Raises:
            StoreUnavailable: Redis failed.
        """
        try:
            answer = await cast("Awaitable[list[bytes | None]]", self._redis.hmget(
                _keys(namespace_id).revocations, ["", *grant_ids]))
        except STORE_ERRORS as exc:
            raise store_unavailable("grants.check", exc) from exc
        revision, *revoked_from = answer
        return _revocation_check(grant_ids, revoked_from, revision, at_ms)

    async def _hget(self, key: str, field: str) -> bytes | None:
        try:
            raw = await cast("Awaitable[bytes | None]", self._redis.hget(key, field))
        except STORE_ERRORS as exc:
            raise store_unavailable("grants.revoke", exc) from exc
        return raw
