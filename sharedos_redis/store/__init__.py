"""Redis-backed host ports shared by transport, router and worker.

Owns the key schema (``keys``), the Lua loader (``scripts``), the client factory
(``client``), the grant store, the atomic grant usage store, the audit sink and
the per-trace hop budget. Imports nothing of ours but ``kernel`` and ``errors``.
"""

from .audit import AUDIT_FIELD, RedisAuditSink, audit_fields
from .budget import TraceBudget
from .client import RedisSettings, create_redis
from .grants import RedisGrantStore
from .keys import (
    MARKER_FIELDS,
    OPEN_STATES,
    RELAY_GROUP,
    STATES,
    TERMINAL_STATES,
    Keys,
    address_tag,
    decode_id,
    encode_id,
)
from .scripts import Scripts, lua_source
from .usage import RedisGrantUsageStore

__all__ = [
    "AUDIT_FIELD",
    "MARKER_FIELDS",
    "OPEN_STATES",
    "RELAY_GROUP",
    "STATES",
    "TERMINAL_STATES",
    "Keys",
    "RedisAuditSink",
    "RedisGrantStore",
    "RedisGrantUsageStore",
    "RedisSettings",
    "Scripts",
    "TraceBudget",
    "address_tag",
    "audit_fields",
    "create_redis",
    "decode_id",
    "encode_id",
    "lua_source",
]
