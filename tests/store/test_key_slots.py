"""Keys: every key of a namespace on one cluster slot; no id can reach another's keys."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st
from redis.crc import key_slot

from sharedos_redis.store.keys import Keys, decode_id, encode_id

_ids = st.text(min_size=1, max_size=256)


def _all_keys(keys: Keys, ident: str) -> list[str]:
    return [keys.message(ident), keys.outbox, keys.open, keys.leases, keys.settled,
            keys.budget(ident), keys.grants("agent", ident), keys.usage, keys.audit, keys.dead]


@given(ns=_ids, ident=_ids)
def test_every_key_of_a_namespace_hashes_to_one_slot(ns: str, ident: str) -> None:
    keys = Keys(ns)
    slots = {key_slot(key.encode()) for key in _all_keys(keys, ident)}
    assert slots == {key_slot(f"{{{encode_id(ns)}}}".encode())}


@given(a=_ids, b=_ids, ident_a=_ids, ident_b=_ids)
def test_distinct_namespaces_never_share_a_key(a: str, b: str, ident_a: str, ident_b: str) -> None:
    if a == b:
        return
    assert not set(_all_keys(Keys(a), ident_a)) & set(_all_keys(Keys(b), ident_b))
    assert not any(key.startswith(Keys(b).prefix) for key in _all_keys(Keys(a), ident_a))


@given(ident=_ids)
def test_encoding_round_trips_and_holds_no_separators(ident: str) -> None:
    encoded = encode_id(ident)
    assert decode_id(encoded) == ident
    assert not set(encoded) & set("{}:* ")


def test_crafted_namespaces_stay_apart() -> None:
    plain, crafted = Keys("a"), Keys("a}:x")
    assert plain.message("m") != crafted.message("m")
    assert not crafted.outbox.startswith(plain.prefix)
    assert plain.grants("agent", "b:c") != plain.grants("agent:b", "c")
