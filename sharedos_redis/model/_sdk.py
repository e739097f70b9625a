"""Provider SDK errors mapped to :class:`~sharedos_redis.errors.ModelCallFailed`, in one place.

The official ``openai`` and ``anthropic`` SDKs share one exception layout
(``APIStatusError`` with ``status_code`` and ``response``, ``APITimeoutError``,
``APIConnectionError``, ``APIError``); :func:`map_sdk_errors` translates it at the
driver boundary (never by matching an error's text). Imports no SDK itself: the
driver passes its own module in.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from types import ModuleType

from ..errors import ModelCallFailed
from .protocol import classify_status

__all__ = ["bad_response", "map_sdk_errors"]


def _retry_after(headers: Mapping[str, str]) -> float | None:
    value = headers.get("retry-after")
    try:
        return max(0.0, float(value)) if value is not None else None
    except ValueError:  # an HTTP date: fall back to the policy's own backoff
        return None


def bad_response() -> ModelCallFailed:
    """The failure for a provider reply that cannot be read (not retried)."""
    return ModelCallFailed("bad_response", retryable=False)


@contextmanager
def map_sdk_errors(sdk: ModuleType) -> Iterator[None]:
    """Translate the SDK's exceptions raised inside the block into ModelCallFailed.

    Raises:
        ModelCallFailed: the call failed; ``kind`` and ``retryable`` say how.
    """
    try:
        yield
    except sdk.APIStatusError as exc:
        kind, retryable = classify_status(exc.status_code)
        raise ModelCallFailed(kind, retryable=retryable, status=exc.status_code,
                              retry_after_s=_retry_after(exc.response.headers)) from exc
    except sdk.APITimeoutError as exc:  # before APIConnectionError, its base class
        raise ModelCallFailed("timeout", retryable=True) from exc
    except sdk.APIConnectionError as exc:
        raise ModelCallFailed("unavailable", retryable=True) from exc
    except sdk.APIError as exc:  # e.g. a response the SDK could not validate
        raise bad_response() from exc
