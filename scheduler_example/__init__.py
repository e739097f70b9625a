"""An example host for sharedos-redis: agents, grants, a tick scheduler, scripted runtimes.

``python -m scheduler_example`` runs it on an embedded fakeredis;
``sharedos-redis worker --app scheduler_example:host`` runs its worker.
"""

from .app import build_host, host, issue_grants

__all__ = ["build_host", "host", "issue_grants"]
