"""Moved to :mod:`tests.servers`; kept so existing imports keep working."""

from tests.servers import RedisServer

__all__ = ["RedisServer"]
