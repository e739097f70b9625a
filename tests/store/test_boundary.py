"""The error boundary maps every lower-level class a Redis call can raise, and only those."""

from __future__ import annotations

import inspect
import ssl

import pytest
import redis.exceptions

from sharedos_redis.errors import StoreUnavailable
from sharedos_redis.store.boundary import store_errors


def _redis_exception_classes() -> list[type[BaseException]]:
    return [cls for _, cls in inspect.getmembers(redis.exceptions, inspect.isclass)
            if issubclass(cls, BaseException) and cls.__module__.startswith("redis")]


@pytest.mark.parametrize("cls", _redis_exception_classes(), ids=lambda c: c.__name__)
def test_every_redis_exception_class_is_mapped(cls: type[BaseException]) -> None:
    # MOVED/ASK errors parse "<slot> <host:port>" from their message
    text = "1 127.0.0.1:7000" if issubclass(cls, redis.exceptions.AskError) else "boom"
    raised = cls(text)
    with pytest.raises(StoreUnavailable) as caught, store_errors("probe"):
        raise raised
    assert caught.value.operation == "probe" and caught.value.__cause__ is raised
    assert cls.__name__ in str(caught.value)


@pytest.mark.parametrize("exc", [ConnectionRefusedError(111, "refused"), TimeoutError(),
                                 ssl.SSLCertVerificationError("hostname mismatch"),
                                 OSError("network unreachable")],
                         ids=lambda e: type(e).__name__)
def test_socket_tls_and_timeout_errors_are_mapped(exc: BaseException) -> None:
    with pytest.raises(StoreUnavailable), store_errors("probe"):
        raise exc


def test_other_errors_pass_through() -> None:
    with pytest.raises(KeyError), store_errors("probe"):
        raise KeyError("a bug is not an outage")
