"""Loads the Lua scripts in ``store/lua/`` once and calls them by name.

Each ``lua/<verb_noun>.lua`` file opens with its KEYS/ARGV/return contract; the
helpers they share (server time, attributed audit records, the terminal cleanup,
settlement and dead-letter entries) are ``lua/_prelude.lua``, put in front of every
script when it is loaded; the audit records a script queues are written after it, as
one stream entry.
A script with more than a few arguments takes them by name, without JSON: ``named()`` in
the prelude reads ARGV as name/value pairs into a table ``a``, :func:`named_args` builds
that list from keyword arguments; the names are the ``a.<name>`` the script's header
declares, and a name missing or unknown on either side fails (here, and in the tests).
redis-py's ``AsyncScript`` sends EVALSHA and reloads on NOSCRIPT, so a server
restart or SCRIPT FLUSH is handled. On a Redis Cluster its reload (``SCRIPT LOAD`` to
the primaries the client knows) can miss a just-promoted replica, whose script
cache is empty, so a second NOSCRIPT falls back to ``EVAL``: it routes by ``KEYS[1]``
like the EVALSHA and caches the script on the node that runs it (a NOSCRIPT
script never ran, so running it now runs it once). Redis errors are translated here
to :class:`~sharedos_redis.errors.StoreUnavailable`.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from functools import cache
from importlib import resources
from itertools import takewhile
from typing import Any

from redis.asyncio import Redis
from redis.commands.core import AsyncScript
from redis.exceptions import NoScriptError

from .boundary import store_errors

__all__ = ["PRELUDE", "Scripts", "argument_names", "lua_source", "named_args",
           "script_source"]

PRELUDE = "_prelude"
_NAMED = re.compile(r"(?<![\w.])a\.([A-Za-z_]\w*)")


@cache
def lua_source(name: str) -> str:
    """The text of ``store/lua/<name>.lua``."""
    return resources.files(__package__).joinpath("lua", f"{name}.lua").read_text("utf-8")


@cache
def script_source(name: str) -> str:
    """What runs as script ``name``: the shared prelude, then ``lua/<name>.lua`` as a
    function whose result is returned after ``audit_flush()`` wrote the records it
    queued as one audit stream entry (store/audit.py)."""
    return (f"{lua_source(PRELUDE)}\nlocal function body()\n{lua_source(name)}\nend\n"
            "local result = body()\naudit_flush()\nreturn result\n")


@cache
def argument_names(name: str) -> frozenset[str]:
    """The named arguments script ``name`` declares: each ``a.<name>`` in the comment lines
    it opens with (its header), what ``named()`` in ``lua/_prelude.lua`` reads."""
    header = takewhile(lambda line: line.startswith("--"), lua_source(name).splitlines())
    return frozenset(_NAMED.findall("\n".join(header)))


def named_args(script: str, /, *rest: Any, **args: Any) -> list[Any]:
    """The ARGV of ``script`` from its named arguments: the number of pairs, each name and
    its value (``named()`` in ``lua/_prelude.lua`` reads them), then ``rest``, positional
    (the carried audit records).

    Raises:
        TypeError: ``args`` are not exactly the names the script's header declares.
    """
    declared = argument_names(script)
    if args.keys() != declared:
        raise TypeError(f"{script}: missing arguments {sorted(declared - args.keys())}, "
                        f"unknown {sorted(args.keys() - declared)}")
    argv: list[Any] = [len(args)]
    for pair in args.items():
        argv += pair
    argv += rest
    return argv


class Scripts:
    """The registered scripts of one Redis client."""

    def __init__(self, redis: Redis) -> None:
        self._redis = redis
        self._scripts: dict[str, AsyncScript] = {}

    def _script(self, name: str) -> AsyncScript:
        script = self._scripts.get(name)
        if script is None:
            script = self._redis.register_script(script_source(name))
            self._scripts[name] = script
        return script

    async def call(self, name: str, keys: Sequence[str], args: Sequence[Any]) -> Any:
        """Run script ``name`` atomically.

        Raises:
            StoreUnavailable: Redis failed or could not be reached.
        """
        script = self._script(name)
        with store_errors(name):
            try:  # EVALSHA straight away: redis-py's script call adds nothing on this path
                return await self._redis.evalsha(  # type: ignore[misc]  # async client
                    script.sha, len(keys), *keys, *args)
            except NoScriptError:  # a restart or SCRIPT FLUSH: redis-py loads it again
                pass
            try:
                return await script(keys=list(keys), args=list(args))
            except NoScriptError:  # see the module doc: a promoted replica on a cluster
                return await self._redis.eval(  # type: ignore[misc]  # async client
                    script_source(name), len(keys), *keys, *args)

    async def call_named(self, name: str, keys: Sequence[str], /, *rest: Any,
                         **args: Any) -> Any:
        """Run script ``name`` with named arguments (:func:`named_args`), then ``rest``.

        Raises:
            TypeError: ``args`` are not exactly the names the script declares.
            StoreUnavailable: Redis failed or could not be reached.
        """
        return await self.call(name, keys, named_args(name, *rest, **args))

    async def now_ms(self, key: str) -> int:
        """The server's clock (ms) on the node that owns ``key`` (never a random node).

        Raises:
            StoreUnavailable: Redis failed or could not be reached.
        """
        return int(await self.call("server_time", [key], []))
