"""sharedos-redis: a durable Redis Streams + arq messaging host for SharedOS agents.

The names below are loaded lazily, so ``import sharedos_redis.kernel`` never
imports redis or arq (the kernel is host-neutral).
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

__all__ = [
    "AgentSpec",
    "HostSettings",
    "Kernel",
    "LocalWorker",
    "MessagingHost",
    "RedisAuditSink",
    "RedisGrantStore",
    "RedisGrantUsageStore",
    "RedisRequestRouter",
    "RedisSettings",
    "RedisStreamTransport",
    "ScriptedRuntime",
    "SharedOSError",
    "TraceBudget",
    "TurnExecutor",
    "create_redis",
]

_WHERE = {
    "AgentSpec": "worker", "HostSettings": "worker", "LocalWorker": "worker",
    "MessagingHost": "worker", "Kernel": "kernel", "ScriptedRuntime": "kernel",
    "TurnExecutor": "kernel", "RedisAuditSink": "store", "RedisGrantStore": "store",
    "RedisGrantUsageStore": "store", "RedisSettings": "store", "TraceBudget": "store",
    "create_redis": "store", "RedisRequestRouter": "router",
    "RedisStreamTransport": "transport", "SharedOSError": "errors",
}

if TYPE_CHECKING:
    from .errors import SharedOSError
    from .kernel import Kernel, ScriptedRuntime, TurnExecutor
    from .router import RedisRequestRouter
    from .store import (
        RedisAuditSink,
        RedisGrantStore,
        RedisGrantUsageStore,
        RedisSettings,
        TraceBudget,
        create_redis,
    )
    from .transport import RedisStreamTransport
    from .worker import AgentSpec, HostSettings, LocalWorker, MessagingHost


def __getattr__(name: str) -> Any:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module 'sharedos_redis' has no attribute {name!r}")
    return getattr(import_module(f".{module}", __name__), name)
