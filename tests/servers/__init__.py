"""Private Redis servers for tests: plain, AOF, TLS, ACL users, Sentinel, Redis Cluster.

Each is a real ``redis-server`` process on a free loopback port, started by the
test and stopped by its PID (never the shared server at ``REDIS_URL``). Fixtures:
``servers`` (a pool), ``redis_server``, ``tls_redis_server``, ``sentinel_cluster``,
``tls_material``, ``local_cluster`` (see :mod:`tests.servers.fixtures`).
"""

from ._process import ServerStartError, free_port, require_redis_server
from .acl import DEFAULT_COMMANDS, AclUser, add_acl_user
from .cluster import LocalCluster, namespaces_on_distinct_nodes
from .fixtures import ServerPool
from .redis_server import RedisServer
from .sentinel import MASTER_NAME, SentinelCluster
from .tls import WRONG_HOSTNAME, CertPair, TlsMaterial, make_tls_material

__all__ = ["DEFAULT_COMMANDS", "MASTER_NAME", "WRONG_HOSTNAME", "AclUser", "CertPair",
           "LocalCluster", "RedisServer", "SentinelCluster", "ServerPool", "ServerStartError",
           "TlsMaterial", "add_acl_user", "free_port", "make_tls_material",
           "namespaces_on_distinct_nodes", "require_redis_server"]
