"""The worker side: the host object, recipient turns, reconciler, arq settings, the
stream worker (Redis Cluster), CLI.

Only this package touches asyncio (arq needs it).
"""

from .fencing import ToolCallScope, current_call
from .host import AgentSpec, MessagingHost
from .local import LocalWorker
from .reconciler import Reconciler
from .settings import HostSettings
from .streams import StreamWorker
from .turns import TurnRunner

__all__ = ["AgentSpec", "HostSettings", "LocalWorker", "MessagingHost", "Reconciler",
           "StreamWorker", "ToolCallScope", "TurnRunner", "current_call"]
