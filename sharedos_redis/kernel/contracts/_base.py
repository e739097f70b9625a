"""The contract base class and the one parse entry point.

Owns: ``Contract`` (strict, frozen, camelCase on the wire), ``Checked``,
``Versioned``, ``parse_wire`` / ``parse_json`` / ``to_wire``; re-exports the
scalar types of ``_scalars``. Imports nothing of ours but ``errors``.
"""

from __future__ import annotations

import inspect
import json
from collections.abc import Mapping
from functools import cache, partial
from operator import is_
from typing import Any, Final, Literal, Self, TypeVar, cast

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    TypeAdapter,
    ValidationError,
    ValidationInfo,
    model_validator,
)
from pydantic.alias_generators import to_camel
from pydantic.fields import FieldInfo
from pydantic_core import PydanticCustomError

from ...errors import ContractError, UnsupportedProtocolVersion
from ._scalars import (
    MAX_JSON_DEPTH,
    PROTOCOL_VERSION,
    Action,
    Identifier,
    JsonObject,
    JsonValue,
    Lax,
    PathSegment,
    Purpose,
    Timestamp,
    encodable,
    epoch_ms,
    format_timestamp,
    timestamp_ms,
)

__all__ = [
    "MAX_JSON_DEPTH",
    "PROTOCOL_VERSION",
    "Action",
    "Checked",
    "Contract",
    "Identifier",
    "JsonObject",
    "JsonValue",
    "Lax",
    "PathSegment",
    "Purpose",
    "Timestamp",
    "Versioned",
    "encodable",
    "epoch_ms",
    "format_timestamp",
    "parse_json",
    "parse_wire",
    "timestamp_ms",
    "to_wire",
]

T = TypeVar("T")


_IS_NONE: Final = partial(is_, None)
"""``exclude_if`` of every optional field: a C-level call, no Python frame per field."""

_NULL_CHECKED: dict[type, tuple[str, ...]] = {}


def _null_checked_keys(cls: type[BaseModel]) -> tuple[str, ...]:
    """The wire keys of ``cls``'s optional fields but ``version`` (computed once per class)."""
    found = _NULL_CHECKED.get(cls)
    if found is None:
        found = _NULL_CHECKED[cls] = tuple(
            key for name, field in cls.model_fields.items()
            if not field.is_required() and (key := field.alias or name) != "version")
    return found


class Contract(BaseModel):
    """Base of every wire model: strict, frozen, unknown keys rejected, camelCase aliases.

    Parse untrusted input with :meth:`from_wire` / :meth:`from_json` (they raise
    :class:`~sharedos_redis.errors.ContractError`), produce the wire form with
    :meth:`to_wire` / :meth:`to_json`. Absent optional fields are omitted.
    """

    model_config = ConfigDict(
        frozen=True,
        strict=True,
        extra="forbid",
        alias_generator=to_camel,
        validate_by_name=True,
        validate_by_alias=True,
        serialize_by_alias=True,
        hide_input_in_errors=True,
        cache_strings="keys",
        # a model instance used as a field value is validated again, so a validated
        # outer object never hides a nested one made with model_construct
        revalidate_instances="always",
    )

    def __init_subclass__(cls, **kwargs: Any) -> None:
        # Absent optional fields are omitted from the wire form: every field with a
        # default (declared in this class; inherited ones already carry it) is excluded
        # when its value is None. Set before pydantic collects the fields, so the
        # omission runs inside pydantic-core (no Python serializer per model). A JSON
        # null inside a value (a payload, metadata) and a required field's None stay.
        super().__init_subclass__(**kwargs)
        for name, annotation in inspect.get_annotations(cls).items():
            if name.startswith("_") or name not in cls.__dict__ or "ClassVar" in str(annotation):
                continue
            default = cls.__dict__[name]
            if isinstance(default, FieldInfo):
                if default.exclude_if is None:
                    default.exclude_if = _IS_NONE
            elif not callable(default) and not isinstance(default, property | classmethod
                                                          | staticmethod):
                setattr(cls, name, Field(default=default, exclude_if=_IS_NONE))

    @model_validator(mode="before")
    @classmethod
    def _no_wire_nulls(cls, data: Any, info: ValidationInfo) -> Any:
        # On the wire an absent optional field is omitted, never null (as in SharedOS,
        # whose optional fields accept undefined only). Python callers may pass None.
        context = info.context
        if context and context.get("wire") and (type(data) is dict or isinstance(data, Mapping)):
            for key in _null_checked_keys(cls):
                if key in data and data[key] is None:
                    raise PydanticCustomError(
                        "null_optional", "absent optional fields are omitted, never null"
                    )
        return data

    @classmethod
    def model_validate(cls, obj: Any, *, strict: bool | None = None,
                       extra: Any = None, from_attributes: bool | None = None,
                       context: Any = None, by_alias: bool | None = None,
                       by_name: bool | None = None) -> Self:
        """The same strict wire parse as :meth:`from_wire` (one door for untrusted data).

        pydantic's options are ignored: camelCase keys only, a versioned object's
        ``version`` required, ``null`` optionals rejected. Python callers build
        instances with the constructor (field names).

        Raises:
            UnsupportedProtocolVersion: a versioned object's version is missing or not "2".
            ContractError: anything else is wrong.
        """
        return parse_wire(cls, obj)

    @classmethod
    def model_validate_json(cls, json_data: str | bytes | bytearray, *,
                            strict: bool | None = None, extra: Any = None,
                            context: Any = None, by_alias: bool | None = None,
                            by_name: bool | None = None) -> Self:
        """The same strict parse as :meth:`from_json`; see :meth:`model_validate`.

        Raises:
            ContractError: the text is not JSON or does not satisfy the contract.
        """
        return parse_json(cls, bytes(json_data) if isinstance(json_data, bytearray) else json_data)

    @classmethod
    def from_wire(cls, data: object) -> Self:
        """Parse a decoded JSON object (camelCase keys only).

        Raises:
            UnsupportedProtocolVersion: a versioned object's version is missing or not "2".
            ContractError: anything else is wrong.
        """
        return parse_wire(cls, data)

    @classmethod
    def from_json(cls, text: str | bytes) -> Self:
        """Parse JSON text; see :meth:`from_wire`."""
        return parse_json(cls, text)

    # Both call the serializer model_dump / model_dump_json call, with the same options,
    # without their Python wrapper (these are on every round trip's path).

    def to_wire(self) -> dict[str, Any]:
        """The JSON-compatible wire form (camelCase, absent optionals omitted)."""
        return cast(dict[str, Any], self.__pydantic_serializer__.to_python(
            self, mode="json", by_alias=True))

    def to_json(self) -> str:
        """The wire form as compact JSON text."""
        return self.__pydantic_serializer__.to_json(self, by_alias=True).decode()


class Checked(Contract):
    """A contract that remembers it was validated (``is_validated``).

    ``model_construct`` and ``model_copy(update=...)`` skip validation; instances made
    that way report False, so the authorizer re-validates them before trusting them
    and skips the costly round trip for everything else.
    """

    # The mark lives in pydantic's private-state slot as a plain dict, set by the after
    # validator: no PrivateAttr, whose per-instance initialisation costs about as much as
    # validating a small model. model_construct leaves the slot None (no private
    # attributes), model_copy(update=...) empties it; copies, pickles and deep copies
    # carry it like any private state.

    @model_validator(mode="after")
    def _mark_validated(self) -> Self:
        object.__setattr__(self, "__pydantic_private__", {"_validated": True})
        return self

    @property
    def is_validated(self) -> bool:
        """True when this instance went through validation unchanged."""
        private = getattr(self, "__pydantic_private__", None)
        return private is not None and private.get("_validated") is True

    def model_copy(self, *, update: Mapping[str, Any] | None = None, deep: bool = False) -> Self:
        """Copy; a copy with ``update`` is unvalidated (see the class docstring)."""
        copy = super().model_copy(update=update, deep=deep)
        if update:
            object.__setattr__(copy, "__pydantic_private__", None)
        return copy


class Versioned(Contract):
    """A contract stamped with the wire epoch; a wrong version is its own error."""

    version: Literal["2"] = PROTOCOL_VERSION

    @model_validator(mode="before")
    @classmethod
    def _check_version(cls, data: Any, info: ValidationInfo) -> Any:
        if isinstance(data, Mapping):
            wire = bool(info.context and info.context.get("wire"))
            if ("version" in data or wire) and data.get("version") != PROTOCOL_VERSION:
                raise PydanticCustomError(
                    "unsupported_protocol_version", "unsupported protocol version"
                )
        return data


@cache
def _adapter(tp: Any) -> TypeAdapter[Any]:
    return TypeAdapter(tp)


def _model_name(tp: Any) -> str:
    return str(getattr(tp, "__name__", None) or getattr(tp, "__origin__", tp))


def _translate(tp: Any, exc: ValidationError, data: object) -> ContractError:
    errors = exc.errors(include_url=False, include_input=False, include_context=False)
    name = _model_name(tp)
    for error in errors:
        if error["type"] == "unsupported_protocol_version":
            version = data.get("version") if isinstance(data, Mapping) else None
            return UnsupportedProtocolVersion(name, version)
    return ContractError(name, [{"loc": e["loc"], "type": e["type"], "msg": e["msg"]}
                                for e in errors])


def parse_wire(tp: type[T] | Any, data: object) -> T:
    """Validate a decoded JSON value as ``tp`` (a Contract or a union alias).

    Raises:
        UnsupportedProtocolVersion: a versioned object's version is missing or wrong.
        ContractError: the value does not satisfy the contract.
    """
    if isinstance(tp, type) and issubclass(tp, Versioned) and not (
        isinstance(data, Mapping) and data.get("version") == PROTOCOL_VERSION
    ):
        raise UnsupportedProtocolVersion(tp.__name__,
                                         data.get("version") if isinstance(data, Mapping) else None)
    try:
        if isinstance(tp, type) and issubclass(tp, BaseModel):
            # the validator itself: Contract.model_validate is this function
            return cast(T, tp.__pydantic_validator__.validate_python(
                data, by_alias=True, by_name=False, context={"wire": True}))
        return cast(T, _adapter(tp).validate_python(data, by_alias=True, by_name=False,
                                                    context={"wire": True}))
    except ValidationError as exc:
        raise _translate(tp, exc, data) from None
    except RecursionError:  # pragma: no cover - depth is bounded before this can happen
        raise ContractError(_model_name(tp), [{"loc": (), "type": "json_depth",
                                               "msg": "nested too deeply"}]) from None


def parse_json(tp: type[T] | Any, text: str | bytes) -> T:
    """Decode JSON text and validate it as ``tp``; see :func:`parse_wire`.

    Raises:
        ContractError: the text is not JSON or the value does not satisfy the contract.
    """
    try:
        data = json.loads(text)
    except (ValueError, RecursionError) as exc:
        raise ContractError(_model_name(tp), [{"loc": (), "type": "json_invalid",
                                               "msg": f"not JSON: {type(exc).__name__}"}]) from None
    parsed: T = parse_wire(tp, data)
    return parsed


def to_wire(value: Any) -> Any:
    """The wire form of a contract or of a union member (see :meth:`Contract.to_wire`)."""
    if isinstance(value, Contract):
        return value.to_wire()
    kind: Any = type(value)
    return _adapter(kind).dump_python(value, mode="json", by_alias=True)
