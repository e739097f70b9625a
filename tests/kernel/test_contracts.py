"""Wire contracts (SPEC §1): golden fixtures, edge cases and property tests.

Fixtures: ``fixtures/valid.json`` maps a model name to named wire objects that
must parse and round-trip exactly; ``fixtures/invalid.json`` lists named cases,
each either a whole ``data`` object or a ``base`` valid case patched with ``set``
and ``delete`` (dotted paths, list indexes as numbers), and the expected error
(``version`` = UnsupportedProtocolVersion, ``contract`` = any other ContractError).
"""

from __future__ import annotations

import contextlib
import copy
import json
import math
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sharedos_redis.errors import ContractError, UnsupportedProtocolVersion
from sharedos_redis.kernel.contracts import (
    MAX_JSON_DEPTH,
    AccessContext,
    Address,
    AuditEvent,
    AuthorizationDecision,
    Capability,
    CapabilityConstraints,
    CapabilityGrant,
    CapabilityRequirement,
    ExecutionEvent,
    ExecutionRequest,
    ExecutionResult,
    MessageDeliveryResult,
    MessageEnvelope,
    MessageRequestArguments,
    ProtocolError,
    ResourceRef,
    ToolCall,
    ToolDefinition,
    ToolResult,
    agent,
    format_timestamp,
    parse_json,
    parse_wire,
    timestamp_ms,
    to_wire,
)

FIXTURES = Path(__file__).parent / "fixtures"
VALID: dict[str, dict[str, Any]] = json.loads((FIXTURES / "valid.json").read_text("utf-8"))
INVALID: list[dict[str, Any]] = json.loads((FIXTURES / "invalid.json").read_text("utf-8"))

MODELS: dict[str, Any] = {
    "Address": Address,
    "MessageEnvelope": MessageEnvelope,
    "MessageRequestArguments": MessageRequestArguments,
    "MessageDeliveryResult": MessageDeliveryResult,
    "ProtocolError": ProtocolError,
    "ResourceRef": ResourceRef,
    "Capability": Capability,
    "CapabilityConstraints": CapabilityConstraints,
    "CapabilityGrant": CapabilityGrant,
    "CapabilityRequirement": CapabilityRequirement,
    "AccessContext": AccessContext,
    "AuthorizationDecision": AuthorizationDecision,
    "ToolDefinition": ToolDefinition,
    "ToolCall": ToolCall,
    "ToolResult": ToolResult,
    "ExecutionRequest": ExecutionRequest,
    "ExecutionEvent": ExecutionEvent,
    "ExecutionResult": ExecutionResult,
    "AuditEvent": AuditEvent,
}
VALID_CASES = [(model, name) for model, cases in VALID.items() for name in cases]


def valid(model: str, name: str) -> Any:
    return copy.deepcopy(VALID[model][name])


def _walk(data: Any, dotted: str) -> tuple[Any, Any]:
    *parents, last = (int(part) if part.isdigit() else part for part in dotted.split("."))
    for part in parents:
        data = data[part]
    return data, last


def invalid_data(case: dict[str, Any]) -> Any:
    if "data" in case:
        return copy.deepcopy(case["data"])
    data = valid(*case["base"])
    for dotted, value in case.get("set", {}).items():
        parent, key = _walk(data, dotted)
        parent[key] = value
    for dotted in case.get("delete", []):
        parent, key = _walk(data, dotted)
        del parent[key]
    return data


def test_every_spec_model_has_valid_and_invalid_fixtures() -> None:
    assert set(VALID) == set(MODELS)
    assert {case["model"] for case in INVALID} == set(MODELS)
    names = [(case["model"], case["name"]) for case in INVALID]
    assert len(names) == len(set(names))


@pytest.mark.parametrize(("model", "name"), VALID_CASES, ids=[f"{m}:{n}" for m, n in VALID_CASES])
def test_valid_fixture_parses_and_round_trips(model: str, name: str) -> None:
    data = valid(model, name)
    parsed = parse_wire(MODELS[model], data)
    assert to_wire(parsed) == data
    assert parse_json(MODELS[model], json.dumps(data)) == parsed
    assert json.loads(parsed.to_json()) == data


@pytest.mark.parametrize("case", INVALID, ids=[f"{c['model']}:{c['name']}" for c in INVALID])
def test_invalid_fixture_is_refused(case: dict[str, Any]) -> None:
    data = invalid_data(case)
    with pytest.raises(ContractError) as raised:
        parse_wire(MODELS[case["model"]], data)
    is_version = isinstance(raised.value, UnsupportedProtocolVersion)
    assert is_version == (case["error"] == "version"), raised.value
    if isinstance(raised.value, UnsupportedProtocolVersion):
        assert raised.value.code == "unsupported_protocol_version"


def test_spec_envelope_and_reply() -> None:
    request = MessageEnvelope.from_wire(valid("MessageEnvelope", "spec envelope"))
    reply = MessageEnvelope.from_wire(valid("MessageEnvelope", "spec reply"))
    assert reply.reply_to == request.id and reply.sender == request.receiver
    assert reply.receiver == request.sender and reply.trace_id == request.trace_id
    assert request.sender == agent("bob") and request.payload == {"question": "Atlas status?"}
    assert timestamp_ms(reply.created_at) - timestamp_ms(request.created_at) == 5000


def test_version_is_checked_before_anything_else() -> None:
    cases: list[object] = [{}, {"version": "1"}, {"version": "1", "intent": "x", "id": ""},
                           [], "2", None]
    for data in cases:
        with pytest.raises(UnsupportedProtocolVersion):
            MessageEnvelope.from_wire(data)


def test_identifiers_and_purpose_are_trimmed() -> None:
    data = valid("MessageEnvelope", "spec envelope")
    data.update(id="  m-1\t", purpose=" atlas-status ", traceId="\nt-1")
    data["sender"]["agentId"] = " bob "
    parsed = MessageEnvelope.from_wire(data)
    assert (parsed.id, parsed.purpose, parsed.trace_id) == ("m-1", "atlas-status", "t-1")
    assert parsed.sender == agent("bob")
    assert MessageEnvelope.from_wire(data | {"id": " " + "i" * 256 + " "}).id == "i" * 256


def test_path_segments_keep_inner_characters() -> None:
    ref = ResourceRef.from_wire({"namespace": "files", "path": ["a b", "...", ".x", "x."]})
    assert ref.path == ("a b", "...", ".x", "x.")


def test_model_authored_recipient_is_not_trimmed_but_identifiers_are() -> None:
    # An Address trims; a recipient the model wrote must be exact or refused.
    assert parse_wire(Address, {"kind": "agent", "agentId": " alice "}) == agent("alice")
    with pytest.raises(ContractError):
        MessageRequestArguments.from_wire(
            {"recipient": {"kind": "agent", "agentId": " alice "}, "payload": None}
        )
    args = MessageRequestArguments.from_wire(valid("MessageRequestArguments", "agent"))
    assert args.recipient_address() == agent("alice")


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
def test_nan_and_infinity_are_refused(bad: float) -> None:
    data = valid("MessageEnvelope", "spec envelope")
    for payload in (bad, [1, bad], {"a": {"b": bad}}):
        with pytest.raises(ContractError):
            MessageEnvelope.from_wire(data | {"payload": payload})
    with pytest.raises(ContractError):
        MessageEnvelope.from_json(json.dumps(data | {"payload": bad}))  # json emits NaN


def test_payload_must_be_json() -> None:
    data = valid("MessageEnvelope", "spec envelope")
    for payload in ({1: "int key"}, (1, 2), {"a": {1, 2}}, b"bytes", object()):
        with pytest.raises(ContractError):
            MessageEnvelope.from_wire(data | {"payload": payload})


def nested(depth: int) -> Any:
    value: Any = None
    for _ in range(depth):
        value = [value]
    return value


def test_json_depth_boundary() -> None:
    data = valid("MessageEnvelope", "spec envelope")
    assert MessageEnvelope.from_wire(data | {"payload": nested(MAX_JSON_DEPTH)})
    with pytest.raises(ContractError):
        MessageEnvelope.from_wire(data | {"payload": nested(MAX_JSON_DEPTH + 1)})


@pytest.mark.parametrize("depth", [1_000, 100_000])
def test_deep_nesting_never_crashes(depth: int) -> None:
    data = valid("MessageEnvelope", "spec envelope")
    with pytest.raises(ContractError):
        MessageEnvelope.from_wire(data | {"payload": nested(depth)})
    text = json.dumps(data)[:-1] + ', "x": ' + "[" * depth + "]" * depth + "}"
    with pytest.raises(ContractError):
        MessageEnvelope.from_json(text)
    with pytest.raises(ContractError):
        MessageEnvelope.from_json("[" * depth)
    deep_sender = data | {"sender": nested(depth)}
    with pytest.raises(ContractError):
        MessageEnvelope.from_wire(deep_sender)


def test_huge_strings_never_crash() -> None:
    huge = "x" * 5_000_000
    data = valid("MessageEnvelope", "spec envelope")
    for key in ("id", "purpose", "traceId", "createdAt", "replyTo"):
        with pytest.raises(ContractError) as raised:
            MessageEnvelope.from_wire(data | {key: huge})
        assert len(str(raised.value)) < 1_000  # the input is never echoed back
    with pytest.raises(ContractError):
        MessageEnvelope.from_json(huge)
    assert MessageEnvelope.from_wire(data | {"payload": huge}).payload == huge


def test_bool_is_not_an_int() -> None:
    with pytest.raises(ContractError):
        CapabilityConstraints.from_wire({"maxUses": True})
    assert CapabilityConstraints.from_wire({"maxUses": 1}).max_uses == 1
    with pytest.raises(ValueError):  # Python construction raises pydantic's ValidationError
        CapabilityConstraints(max_uses=True)


def test_timestamps_compare_at_millisecond_precision() -> None:
    same = ["2026-10-04T09:00:00.000Z", "2026-10-04T09:00Z", "2026-10-04T11:00:00+02:00",
            "2026-10-04T04:00:00-0500", "2026-10-04T09:00:00.0009Z"]
    assert len({timestamp_ms(value) for value in same}) == 1
    assert timestamp_ms("2026-10-04T09:00:00.001Z") == timestamp_ms(same[0]) + 1
    assert timestamp_ms("1970-01-01T00:00:00.001Z") == 1
    assert timestamp_ms("1969-12-31T23:59:59.999Z") == -1
    with pytest.raises(ValueError):
        timestamp_ms("2026-02-30T00:00:00Z")


def test_format_timestamp_round_trips_milliseconds() -> None:
    stamp = "2026-10-04T09:00:00.567Z"
    from datetime import UTC, datetime

    moment = datetime.fromtimestamp(timestamp_ms(stamp) / 1000, UTC)
    assert format_timestamp(moment) == stamp


def test_execution_request_tool_limit() -> None:
    tool = valid("ToolDefinition", "messages.request")
    data = valid("ExecutionRequest", "full")
    assert len(ExecutionRequest.from_wire(data | {"tools": [tool] * 512}).tools) == 512
    with pytest.raises(ContractError):
        ExecutionRequest.from_wire(data | {"tools": [tool] * 513})


def test_models_are_frozen() -> None:
    envelope = MessageEnvelope.from_wire(valid("MessageEnvelope", "spec envelope"))
    with pytest.raises(ValueError):
        envelope.id = "m-2"  # type: ignore[misc]  # the point: assignment must fail


def test_python_field_names_are_unknown_keys_on_the_wire() -> None:
    data = valid("AccessContext", "full")
    data["namespace_id"] = data.pop("namespaceId")
    with pytest.raises(ContractError):
        AccessContext.from_wire(data)


def test_contract_error_describes_without_echoing_input() -> None:
    secret = "s3cr3t-token"
    data = valid("MessageEnvelope", "spec envelope") | {"createdAt": secret}
    with pytest.raises(ContractError) as raised:
        MessageEnvelope.from_wire(data)
    assert secret not in str(raised.value) and secret not in repr(raised.value.errors)
    assert raised.value.model == "MessageEnvelope"
    assert raised.value.errors[0]["loc"] == ("createdAt",)


# --- property tests -------------------------------------------------------------------

_ids = st.text(min_size=1, max_size=12).filter(lambda s: s == s.strip() and bool(s))
_addresses = st.one_of(
    st.builds(lambda i: {"kind": "human", "userId": i}, _ids),
    st.builds(lambda i: {"kind": "agent", "agentId": i}, _ids),
    st.builds(lambda i: {"kind": "group", "conversationId": i}, _ids),
    st.builds(lambda i: {"kind": "service", "serviceId": i}, _ids),
)
_json = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=20),
    lambda children: st.lists(children, max_size=4)
    | st.dictionaries(st.text(max_size=8), children, max_size=4),
    max_leaves=20,
)
_offsets = st.sampled_from(["Z", "+00:00", "-05:00", "+0530", "-1200", "+14:00"])
_timestamps = st.builds(
    lambda ms, zone, style: _stamp(ms, zone, style),
    st.integers(min_value=0, max_value=4_102_444_800_000), _offsets,
    st.sampled_from(["min", "sec", "ms", "ns"]),
)


def _stamp(ms: int, zone: str, style: str) -> str:
    from datetime import UTC, datetime, timedelta

    moment = datetime(1970, 1, 1, tzinfo=UTC) + timedelta(milliseconds=ms)
    if zone != "Z":
        sign = 1 if zone[0] == "+" else -1
        hours, minutes = int(zone[1:3]), int(zone[-2:])
        moment = moment + sign * timedelta(hours=hours, minutes=minutes)
    text = moment.strftime("%Y-%m-%dT%H:%M")
    if style != "min":
        text += moment.strftime(":%S")
    if style == "ms":
        text += f".{moment.microsecond // 1000:03d}"
    if style == "ns":
        text += f".{moment.microsecond:06d}123"
    return text + zone


@st.composite
def envelopes(draw: st.DrawFn) -> dict[str, Any]:
    data: dict[str, Any] = {
        "version": "2", "id": draw(_ids), "sender": draw(_addresses),
        "receiver": draw(_addresses), "purpose": draw(_ids), "payload": draw(_json),
        "traceId": draw(_ids), "createdAt": draw(_timestamps),
    }
    if draw(st.booleans()):
        data["replyTo"] = draw(_ids)
    if draw(st.booleans()):
        data["provenance"] = {"source": draw(_ids),
                              "parentIds": draw(st.lists(_ids, max_size=3))}
    return data


@settings(max_examples=150, deadline=None)
@given(envelopes())
def test_generated_envelopes_round_trip(data: dict[str, Any]) -> None:
    parsed = MessageEnvelope.from_wire(data)
    assert parsed.to_wire() == data
    assert MessageEnvelope.from_json(parsed.to_json()) == parsed


@settings(max_examples=150, deadline=None)
@given(_timestamps)
def test_generated_timestamps_parse(stamp: str) -> None:
    data = valid("MessageEnvelope", "spec envelope") | {"createdAt": stamp}
    assert MessageEnvelope.from_wire(data).created_at == stamp


_keys = st.sampled_from(
    ["version", "id", "sender", "receiver", "purpose", "payload", "traceId", "createdAt",
     "replyTo", "kind", "agentId", "userId", "status", "messageId", "namespace", "path",
     "intent", "error", "code", "message"]
) | st.text(max_size=6)
_anything = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=10)
    | st.sampled_from(["2", "agent", "2026-10-04T09:00:00Z", "..", " x "]),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(_keys, children, max_size=6),
    max_leaves=25,
)


@settings(max_examples=300, deadline=None)
@given(st.sampled_from(sorted(MODELS)), _anything)
def test_arbitrary_input_parses_or_raises_contract_error(model: str, data: Any) -> None:
    try:
        parsed = parse_wire(MODELS[model], data)
    except ContractError:
        return
    assert parse_wire(MODELS[model], to_wire(parsed)) == parsed


@settings(max_examples=300, deadline=None)
@given(envelopes(), st.sampled_from(["id", "sender", "payload", "createdAt", "version", "x"]),
       _anything)
def test_corrupted_envelope_parses_or_raises_contract_error(
    data: dict[str, Any], key: str, value: Any
) -> None:
    data[key] = value
    with contextlib.suppress(ContractError):
        MessageEnvelope.from_wire(data)
    with contextlib.suppress(ContractError):
        MessageEnvelope.from_json(json.dumps(data))


# --- one door: model_validate is the strict wire parse -----------------------------------

_ENVELOPE = {"version": "2", "id": "m-1", "sender": {"kind": "agent", "agentId": "bob"},
             "receiver": {"kind": "agent", "agentId": "alice"}, "purpose": "p",
             "payload": {}, "traceId": "t-1", "createdAt": "2026-10-04T09:00:00Z"}


@pytest.mark.parametrize(("change", "error"), [
    ({"version": None}, "UnsupportedProtocolVersion"),
    ({"trace_id": "t-1", "traceId": None}, "ContractError"),
    ({"replyTo": None}, "ContractError"),
    ({"intent": "x"}, "ContractError"),
])
def test_model_validate_is_as_strict_as_from_wire(change: dict[str, Any], error: str) -> None:
    from sharedos_redis.kernel.contracts import MessageEnvelope

    wire = {k: v for k, v in {**_ENVELOPE, **change}.items()
            if v is not None or k == "replyTo"}
    for door in (MessageEnvelope.model_validate, MessageEnvelope.from_wire,
                 lambda data: MessageEnvelope.model_validate_json(json.dumps(data))):
        with pytest.raises(ContractError) as raised:
            door(wire)
        assert type(raised.value).__name__ == error


def test_model_validate_accepts_exactly_what_from_wire_accepts() -> None:
    from sharedos_redis.kernel.contracts import MessageEnvelope

    assert MessageEnvelope.model_validate(_ENVELOPE) == MessageEnvelope.from_wire(_ENVELOPE)
    assert MessageEnvelope.model_validate_json(json.dumps(_ENVELOPE).encode()) == (
        MessageEnvelope.from_wire(_ENVELOPE))
