"""The top-level ``__all__`` is exactly the public API, and every name resolves."""

from __future__ import annotations

import importlib

import pytest

import sharedos_redis

PACKAGES = ["sharedos_redis", "sharedos_redis.kernel", "sharedos_redis.kernel.contracts",
            "sharedos_redis.store", "sharedos_redis.transport", "sharedos_redis.router",
            "sharedos_redis.worker"]


def test_top_level_all_is_the_public_api() -> None:
    public = {name for name in sharedos_redis._WHERE}
    assert set(sharedos_redis.__all__) == public
    for name in sharedos_redis.__all__:
        assert getattr(sharedos_redis, name) is not None


@pytest.mark.parametrize("package", PACKAGES)
def test_every_exported_name_exists(package: str) -> None:
    module = importlib.import_module(package)
    for name in module.__all__:
        assert hasattr(module, name), f"{package}.{name}"


def test_unknown_attribute_raises() -> None:
    with pytest.raises(AttributeError):
        _ = sharedos_redis.NoSuchThing  # type: ignore[attr-defined]
