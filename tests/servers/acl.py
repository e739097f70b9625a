"""Redis ACL users limited to key patterns and commands, on a server the test started.

Only ever applied to a :class:`RedisServer` (a private process), never to the
shared server at ``REDIS_URL``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from urllib.parse import quote

from .redis_server import RedisServer

__all__ = ["DEFAULT_COMMANDS", "AclUser", "add_acl_user"]

DEFAULT_COMMANDS = ("+@all", "-@dangerous")


@dataclass(frozen=True)
class AclUser:
    """A user's credentials and a URL that logs in as it."""

    name: str
    password: str
    url: str
    rules: tuple[str, ...]


async def add_acl_user(server: RedisServer, name: str, password: str, *,
                       keys: Sequence[str], commands: Sequence[str] = DEFAULT_COMMANDS,
                       channels: Sequence[str] = ()) -> AclUser:
    """``ACL SETUSER name reset on >password ~key... &channel... command-rules...``.

    ``keys`` are glob patterns (``~`` added; pass ``%R~...``/``%W~...`` as is);
    ``channels`` are Pub/Sub patterns (none by default: Redis 7 resets channels).
    Replaces any earlier rules of ``name``.
    """
    rules = ("reset", "on", f">{password}",
             *(k if k.startswith("%") else f"~{k}" for k in keys),
             *(f"&{c}" for c in channels), *commands)
    admin = server.client()
    try:
        await admin.execute_command("ACL", "SETUSER", name, *rules)
    finally:
        await admin.aclose()
    scheme, rest = server.url.split("://", 1)
    url = f"{scheme}://{quote(name, safe='')}:{quote(password, safe='')}@{rest}"
    return AclUser(name=name, password=password, url=url, rules=rules)
