"""Scalar wire types: identifiers, purposes, path segments, RFC 3339 timestamps, JSON values.

Owns the validators behind them and ``timestamp_ms`` / ``format_timestamp``.
Imports nothing of ours but ``errors``.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable
from datetime import UTC, datetime, timedelta, timezone
from typing import Annotated, Any, Final, cast

from pydantic import AfterValidator, PlainValidator, Strict, StringConstraints
from pydantic_core import PydanticCustomError

from ...errors import ContractError

__all__ = [
    "MAX_JSON_DEPTH",
    "PROTOCOL_VERSION",
    "Action",
    "Identifier",
    "JsonObject",
    "JsonValue",
    "Lax",
    "PathSegment",
    "Purpose",
    "Timestamp",
    "checked_namespace_id",
    "encodable",
    "epoch_ms",
    "format_timestamp",
    "timestamp_ms",
]

PROTOCOL_VERSION: Final = "2"
MAX_JSON_DEPTH: Final = 64
"""Deepest nesting a JSON value may have (a deviation: SharedOS sets none)."""


Identifier = Annotated[str, StringConstraints(strip_whitespace=True, min_length=1, max_length=256)]
Purpose = Annotated[str, StringConstraints(strip_whitespace=True, min_length=1, max_length=512)]
Action = Annotated[str, StringConstraints(strip_whitespace=True, min_length=1, max_length=128)]
Lax = Strict(False)
"""Marker for sequence fields: accept a JSON array (list) for a tuple; items stay strict."""

_SEGMENT_FORBIDDEN = re.compile(r"[/\\\x00-\x1f\x7f]")


def encodable(value: str) -> bool:
    """Whether ``value`` is valid Unicode text (no lone surrogates), i.e. encodes as UTF-8."""
    if value.isascii():
        return True
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")


def checked_namespace_id(value: object) -> str:
    """A namespace id exactly as a host, the CLI and the key schema use it.

    The model-authored identifier rule, applied once where a host or CLI is built:
    1 to 256 characters, valid Unicode, no surrounding whitespace (a wire
    ``namespaceId`` is trimmed, so a padded id would name another keyspace than its
    contexts) and no control characters.

    Raises:
        ContractError: the id breaks the rule.
    """
    problem = None
    if not isinstance(value, str) or not 1 <= len(value) <= 256:
        problem = "a namespace id has 1 to 256 characters"
    elif value != value.strip():
        problem = "a namespace id must not be padded with whitespace"
    elif not encodable(value) or _CONTROL.search(value):
        problem = "a namespace id must be valid Unicode without control characters"
    if problem is not None:
        raise ContractError("namespace", [{"loc": ("namespaceId",), "type": "namespace_id",
                                           "msg": problem}])
    return str(value)


def _check_segment(value: str) -> str:
    if not encodable(value):
        raise PydanticCustomError("string_unicode", "not valid Unicode text")
    if not 1 <= len(value) <= 256:
        raise PydanticCustomError("path_segment", "path segments have 1 to 256 characters")
    if value != value.strip():
        raise PydanticCustomError("path_segment", "path segments must not be padded")
    if value in (".", "..") or _SEGMENT_FORBIDDEN.search(value):
        raise PydanticCustomError(
            "path_segment",
            "path segments must not be traversal markers or contain separators or control chars",
        )
    return value


PathSegment = Annotated[str, AfterValidator(_check_segment)]

_TIMESTAMP = re.compile(
    r"(\d{4})-(\d{2})-(\d{2})T(\d{2}):(\d{2})(?::(\d{2})(?:\.(\d{1,9}))?)?"
    r"(Z|[+-]\d{2}:?\d{2})",
    re.ASCII,  # \d must not match non-ASCII digits such as U+FF12
)


def _parse_rfc3339(value: str) -> datetime:
    match = _TIMESTAMP.fullmatch(value)
    if match is None:
        raise ValueError("not an RFC 3339 timestamp")
    year, month, day, hour, minute, second, fraction, zone = match.groups()
    frac = (fraction or "0")[:3].ljust(3, "0")  # millisecond precision
    if zone == "Z":
        tz: timezone = UTC
    else:
        digits = zone[1:].replace(":", "")
        hours, minutes = int(digits[:2]), int(digits[2:])
        if hours > 23 or minutes > 59:
            raise ValueError("offset out of range")
        sign = 1 if zone[0] == "+" else -1
        tz = timezone(sign * timedelta(hours=hours, minutes=minutes))
    # datetime() rejects impossible dates (2026-02-30), hours > 23, minutes/seconds > 59.
    return datetime(int(year), int(month), int(day), int(hour), int(minute), int(second or 0),
                    int(frac) * 1000, tzinfo=tz)


_KNOWN_CAP: Final = 8192
_KNOWN: dict[str, int] = {}
"""Valid timestamp texts seen lately and their epoch ms (a pure function of the text, so
never stale): a round trip formats and validates the same few timestamps many times."""


def _remember(value: str, ms: int) -> None:
    if len(_KNOWN) >= _KNOWN_CAP:
        _KNOWN.clear()  # bounded; a forgotten text is only parsed again
    _KNOWN[value] = ms


def _check_timestamp(value: str) -> str:
    if value in _KNOWN:
        return value
    try:
        timestamp_ms(value)
    except ValueError as exc:
        raise PydanticCustomError("timestamp", "invalid RFC 3339 timestamp: {why}",
                                  {"why": str(exc)}) from None
    return value


Timestamp = Annotated[str, Strict(), AfterValidator(_check_timestamp)]
"""An RFC 3339 timestamp kept as the string it arrived as (JSON-safe, round-trips)."""


_EPOCH: Final = datetime(1970, 1, 1, tzinfo=UTC)
_ONE_MS: Final = timedelta(milliseconds=1)


def timestamp_ms(value: str) -> int:
    """Milliseconds since the epoch of a valid RFC 3339 timestamp.

    Raises:
        ValueError: when ``value`` is not a valid timestamp.
    """
    ms = _KNOWN.get(value)
    if ms is None:
        # Integer arithmetic: float ``timestamp() * 1000`` truncates some values 1 ms low.
        ms = (_parse_rfc3339(value) - _EPOCH) // _ONE_MS
        _remember(value, ms)
    return ms


def format_timestamp(moment: datetime | None = None) -> str:
    """Format ``moment`` (default: now) as RFC 3339 UTC with milliseconds."""
    m = datetime.now(UTC) if moment is None else moment
    if m.tzinfo is not UTC:
        m = m.astimezone(UTC)
    # "YYYY-MM-DDTHH:MM:SS.mmm+00:00" (fraction truncated, year zero-padded) -> "...Z"
    text = m.isoformat(timespec="milliseconds")[:-6] + "Z"
    if text not in _KNOWN:  # valid by construction: its validation and epoch ms are free
        _remember(text, (m - _EPOCH) // _ONE_MS)
    return text


def epoch_ms(moment: datetime) -> int:
    """``timestamp_ms(format_timestamp(moment))`` without the text round trip."""
    m = moment if moment.tzinfo is UTC else moment.astimezone(UTC)
    return (m - _EPOCH) // _ONE_MS


def _children_ok(children: Iterable[Any], depth: int) -> bool:
    """The common case of :func:`_check_json`, fast: True when every child (at ``depth``)
    is plainly valid JSON of the exact built-in types; False on anything else, which
    :func:`_walk_json` then decides (and names)."""
    for item in children:
        kind = type(item)
        if kind is str:
            ok = item.isascii() or encodable(item)
        elif kind is dict or kind is list:
            ok = depth < MAX_JSON_DEPTH and _container_ok(item, depth + 1)
        elif kind is float:
            ok = math.isfinite(item)
        else:
            ok = item is None or kind is int or kind is bool
        if not ok:
            return False
    return True


def _container_ok(item: Any, depth: int) -> bool:
    """A plain list's or dict's children (at ``depth``); a dict's keys are valid text."""
    if type(item) is list:
        return _children_ok(item, depth)
    for key in item:
        if type(key) is not str or not (key.isascii() or encodable(key)):
            return False
    return _children_ok(item.values(), depth)


def _check_json(value: object) -> Any:
    """A JSON value: finite numbers, str keys, valid Unicode, bounded depth."""
    if _children_ok((value,), 0):
        return value
    return _walk_json(value)


def _walk_json(value: object) -> Any:
    """Walk a JSON value iteratively: finite numbers, str keys, bounded depth."""
    stack: list[tuple[object, int]] = [(value, 0)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, str):
            if not encodable(item):
                raise PydanticCustomError("json_value", "strings must be valid Unicode text")
            continue
        if item is None or isinstance(item, bool | int):
            continue
        if isinstance(item, float):
            if not math.isfinite(item):
                raise PydanticCustomError("json_value", "NaN and Infinity are not JSON")
            continue
        if depth >= MAX_JSON_DEPTH:
            raise PydanticCustomError("json_depth", "JSON nested deeper than {limit}",
                                      {"limit": MAX_JSON_DEPTH})
        if isinstance(item, list):
            stack.extend((child, depth + 1) for child in item)
        elif isinstance(item, dict):
            for key, child in item.items():
                if not isinstance(key, str) or not encodable(key):
                    raise PydanticCustomError("json_value",
                                              "JSON object keys are valid Unicode strings")
                stack.append((child, depth + 1))
        else:
            raise PydanticCustomError("json_value", "not a JSON value: {kind}",
                                      {"kind": type(item).__name__})
    return value


def _check_json_object(value: object) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise PydanticCustomError("json_object", "expected a JSON object")
    return cast(dict[str, Any], _check_json(value))


JsonValue = Annotated[Any, PlainValidator(_check_json)]
JsonObject = Annotated[dict[str, Any], PlainValidator(_check_json_object)]
