"""Private Redis servers for tests: plain, AOF, TLS, ACL users and Sentinel clusters.

Each is a real ``redis-server`` process on a free loopback port, started by the
test and stopped by its PID (never the shared server at ``REDIS_URL``). Fixtures:
``servers`` (a pool), ``redis_server``, ``tls_redis_server``, ``sentinel_cluster``,
``tls_material`` (see :mod:`tests.servers.fixtures`).
"""

from ._process import ServerStartError, free_port, require_redis_server
from .acl import DEFAULT_COMMANDS, AclUser, add_acl_user
from .fixtures import ServerPool
from .redis_server import RedisServer
from .sentinel import MASTER_NAME, SentinelCluster
from .tls import WRONG_HOSTNAME, CertPair, TlsMaterial, make_tls_material

__all__ = ["DEFAULT_COMMANDS", "MASTER_NAME", "WRONG_HOSTNAME", "AclUser", "CertPair",
           "RedisServer", "SentinelCluster", "ServerPool", "ServerStartError", "TlsMaterial",
           "add_acl_user", "free_port", "make_tls_material", "require_redis_server"]
