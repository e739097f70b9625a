"""The one exception tree of sharedos-redis.

Refusals are results (a denied ``AuthorizationDecision``, a ``denied`` receipt,
a ``failed`` ``ToolResult``); exceptions are for malformed input, misuse and
infrastructure failure::

    SharedOSError
    ├── ContractError                 a wire object failed validation (also a ValueError)
    │   └── UnsupportedProtocolVersion    its ``version`` is missing or not "2"
    ├── ConfigurationError            the host was set up in a way that cannot work
    ├── StoreUnavailable              Redis (or another store) could not be reached or failed
    ├── AuditUnavailable              a before-effect audit record could not be written
    ├── UnknownMessage                no request with that id exists in the namespace
    ├── TurnFailure                   a runtime ends its turn failed with a typed code (``.code``)
    ├── ModelCallFailed               a model driver's call to its provider failed (``.kind``)
    └── RequestOutcomeError           a request ended without a reply (has ``.code``)
        ├── RequestTimedOut               its deadline passed
        ├── RequestCancelled              it was cancelled by the host
        ├── RequestExpired                its record expired or was evicted while open
        └── RequestFailed                 the recipient side settled it as failed
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

__all__ = [
    "AuditUnavailable",
    "ConfigurationError",
    "ContractError",
    "ModelCallFailed",
    "RequestCancelled",
    "RequestExpired",
    "RequestFailed",
    "RequestOutcomeError",
    "RequestTimedOut",
    "SharedOSError",
    "StoreUnavailable",
    "TurnFailure",
    "UnknownMessage",
    "UnsupportedProtocolVersion",
]


class SharedOSError(Exception):
    """Root of everything this package raises on purpose."""


class ContractError(SharedOSError, ValueError):
    """A wire object did not satisfy its contract.

    Attributes:
        model: name of the contract that was being parsed.
        errors: one mapping per problem, with ``loc`` (path of wire names),
            ``type`` (a short machine code) and ``msg``; never the input value.
    """

    def __init__(self, model: str, errors: Sequence[Mapping[str, Any]]) -> None:
        first = errors[0] if errors else {"loc": (), "msg": "invalid"}
        where = ".".join(str(part) for part in first.get("loc", ())) or "<root>"
        more = f" (+{len(errors) - 1} more)" if len(errors) > 1 else ""
        super().__init__(f"invalid {model}: {where}: {first.get('msg')}{more}")
        self.model = model
        self.errors = tuple(dict(error) for error in errors)


class UnsupportedProtocolVersion(ContractError):
    """The object's ``version`` is missing or is not the wire epoch ``"2"``."""

    def __init__(self, model: str, version: object) -> None:
        shown = repr(version) if isinstance(version, str | int | float | None) else "<non-scalar>"
        super().__init__(
            model,
            [{"loc": ("version",), "type": "unsupported_protocol_version",
              "msg": f"unsupported protocol version {shown[:40]}, expected '2'"}],
        )
        self.code = "unsupported_protocol_version"


class ConfigurationError(SharedOSError):
    """The host was configured in a way that cannot work (raised at setup time)."""


class StoreUnavailable(SharedOSError):
    """A backing store (Redis) failed or could not be reached.

    Attributes:
        operation: what was being attempted, e.g. ``"accept"``.
    """

    def __init__(self, operation: str, cause: str) -> None:
        super().__init__(f"store unavailable during {operation}: {cause}")
        self.operation = operation


class AuditUnavailable(SharedOSError):
    """A before-effect audit record could not be written, so the effect was not attempted."""


class UnknownMessage(SharedOSError):
    """No request with this id exists in this namespace."""

    def __init__(self, namespace: str, message_id: str) -> None:
        super().__init__(f"no request {message_id!r} in namespace {namespace!r}")
        self.namespace, self.message_id = namespace, message_id


class TurnFailure(SharedOSError):
    """Raised by a runtime to end its turn ``failed`` with one of the turn codes.

    The executor accepts ``driver_failed`` (the model or its provider failed),
    ``invalid_driver_decision`` (the model's output could not be used) and
    ``invalid_runtime_outcome`` (the final answer broke the declared output
    schema); any other code becomes ``runtime_failed``. The text stays in the
    host's logs, never in the turn's result.

    Attributes:
        code: the turn code.
    """

    def __init__(self, code: str, reason: str = "") -> None:
        super().__init__(f"turn failed {code}" + (f": {reason}" if reason else ""))
        self.code = code


class ModelCallFailed(SharedOSError):
    """A model driver's call to its provider failed; the standard runtime may retry it.

    Attributes:
        kind: ``rate_limited``, ``timeout``, ``unavailable``, ``bad_request``,
            ``auth`` or ``bad_response``.
        retryable: whether the same call may succeed later.
        status: the provider's HTTP status, when there was one.
        retry_after_s: the provider's ``Retry-After``, when it sent one.
    """

    def __init__(self, kind: str, *, retryable: bool, status: int | None = None,
                 retry_after_s: float | None = None) -> None:
        super().__init__(f"model call failed: {kind}" + (f" (HTTP {status})" if status else ""))
        self.kind, self.retryable = kind, retryable
        self.status, self.retry_after_s = status, retry_after_s


class RequestOutcomeError(SharedOSError):
    """A request ended without a reply; ``code`` is a closed reason code.

    Attributes:
        message_id: the request's trusted id.
        code: e.g. ``request_timed_out``, ``recipient_turn_denied``.
    """

    def __init__(self, message_id: str, code: str, detail: str = "") -> None:
        text = f"request {message_id} ended without a reply: {code}"
        super().__init__(f"{text} ({detail})" if detail else text)
        self.message_id, self.code = message_id, code


class RequestTimedOut(RequestOutcomeError):
    """The request's deadline passed before a reply was settled."""

    def __init__(self, message_id: str) -> None:
        super().__init__(message_id, "request_timed_out")


class RequestCancelled(RequestOutcomeError):
    """The request was cancelled by the host."""

    def __init__(self, message_id: str) -> None:
        super().__init__(message_id, "request_cancelled")


class RequestExpired(RequestOutcomeError):
    """The request's record expired or was evicted while it was still open."""

    def __init__(self, message_id: str) -> None:
        super().__init__(message_id, "request_expired")


class RequestFailed(RequestOutcomeError):
    """The recipient side settled the request as failed (``code`` says why)."""
