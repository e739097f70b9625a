"""The host-neutral SharedOS kernel port. Imports NO redis and NO arq.

Contracts live in :mod:`sharedos_redis.kernel.contracts`; this package exports
the kernel, its authorizer, ports, turn executor and in-memory doubles.
"""

from .authorizer import CapabilityAuthorizer
from .kernel import Kernel
from .memory import InMemoryAuditSink, InMemoryGrantSource, InMemoryGrantUsageStore
from .messaging import MESSAGES_REQUEST_TOOL, invoke_requirement, messaging_requirement
from .ports import (
    AuditSink,
    GrantSource,
    GrantUsageStore,
    MessageRequestRouter,
    MessageTransport,
)
from .reasons import REASON_CODES, ReasonCode
from .scripted import ScriptedRuntime
from .tools import ToolHandler
from .turn import RuntimeHost, RuntimePlugin, TurnExecutor, TurnRequest

__all__ = [
    "MESSAGES_REQUEST_TOOL",
    "REASON_CODES",
    "AuditSink",
    "CapabilityAuthorizer",
    "GrantSource",
    "GrantUsageStore",
    "InMemoryAuditSink",
    "InMemoryGrantSource",
    "InMemoryGrantUsageStore",
    "Kernel",
    "MessageRequestRouter",
    "MessageTransport",
    "ReasonCode",
    "RuntimeHost",
    "RuntimePlugin",
    "ScriptedRuntime",
    "ToolHandler",
    "TurnExecutor",
    "TurnRequest",
    "invoke_requirement",
    "messaging_requirement",
]
