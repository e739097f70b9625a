"""The ``sharedos-redis`` command line: one click group, no logic of its own.

Results go to stdout, logs to stderr (``--log-level``, ``--log-format text|json``).
Exit 0 on success, 1 on a :class:`~sharedos_redis.errors.SharedOSError` or an
unreachable Redis (one line; a traceback only with ``--verbose``), 2 on usage errors
and on worker start-up errors (bad app, bad settings, unreachable Redis).
"""

from __future__ import annotations

import contextlib
import importlib
import json
import os
import sys
import time
from collections.abc import Awaitable, Callable
from typing import Any, NoReturn, TypeVar

import anyio
import click
from click.core import ParameterSource
from redis.asyncio import Redis

from ..console.command import console
from ..errors import ConfigurationError, ContractError, SharedOSError
from ..kernel.contracts import checked_namespace_id, service
from ..router.router import RedisRequestRouter
from ..router.tree import DelegationTree
from ..store.audit import RedisAuditSink
from ..store.boundary import STORE_ERRORS, store_errors, store_unavailable
from ..store.budget import TraceBudget
from ..store.client import RedisSettings, create_redis
from ..store.markers import MarkerStore
from .host import MessagingHost, budget_set_event
from .logs import LogFormat, configure_logging
from .loop import run as run_loop
from .printable import printable
from .redrive import redrive_request
from .tree_view import render_links, render_tree

__all__ = ["main"]

T = TypeVar("T")
DEFAULT_URL = "redis://127.0.0.1:6379/0"


class _Ctx:
    def __init__(self, url: str, url_given: bool, namespace: str | None, verbose: bool) -> None:
        self.url, self.url_given = url, url_given
        self.namespace, self.verbose = namespace, verbose

    def need_namespace(self) -> str:
        if not self.namespace:
            raise click.UsageError("--namespace (or SHAREDOS_NAMESPACE) is required")
        try:
            return checked_namespace_id(self.namespace)
        except ContractError as exc:
            raise click.UsageError(printable(f"--namespace {self.namespace!r}: {exc}")) from None

    def connection(self) -> RedisSettings:
        """The connection: the environment's ``SHAREDOS_REDIS_*`` with ``--redis-url``."""
        try:
            return RedisSettings.from_env(url=self.url)
        except ConfigurationError as exc:
            _fail(str(exc), code=2)

    def run(self, job: Callable[[Redis], Awaitable[T]]) -> T:
        connection = self.connection()

        async def main() -> T:
            redis = create_redis(connection)
            try:
                with store_errors("connect"):
                    await redis.ping()
                    return await job(redis)
            finally:
                with contextlib.suppress(*STORE_ERRORS):
                    await redis.aclose()

        try:
            return anyio.run(main)
        except SharedOSError as exc:
            if self.verbose:
                raise
            _fail(str(exc), code=1)


def _fail(message: str, *, code: int) -> NoReturn:
    click.echo(f"error: {printable(message)}", err=True)
    sys.exit(code)


pass_ctx = click.make_pass_decorator(_Ctx)


@click.group()
@click.option("--redis-url", envvar="SHAREDOS_REDIS_URL", default=DEFAULT_URL, show_default=True,
              help="Redis to connect to; other SHAREDOS_REDIS_* variables add TLS, ACL "
                   "user and pool settings.")
@click.option("--namespace", envvar="SHAREDOS_NAMESPACE", default=None)
@click.option("--log-level", envvar="SHAREDOS_LOG_LEVEL", default="INFO", show_default=True,
              type=click.Choice(["DEBUG", "INFO", "WARNING", "ERROR"], case_sensitive=False))
@click.option("--log-format", envvar="SHAREDOS_LOG_FORMAT", default="text", show_default=True,
              type=click.Choice(["text", "json"]), help="Log lines on stderr as text or JSON.")
@click.option("--verbose", is_flag=True, help="Show tracebacks.")
@click.pass_context
def main(ctx: click.Context, redis_url: str, namespace: str | None, log_level: str,
         log_format: LogFormat, verbose: bool) -> None:
    """sharedos-redis: run workers and inspect requests."""
    configure_logging(log_level, log_format)
    source = ctx.get_parameter_source("redis_url")
    ctx.obj = _Ctx(redis_url, source is not ParameterSource.DEFAULT, namespace, verbose)


def _load_host(spec: str) -> MessagingHost:
    """Import ``module:attribute`` (a host or a function returning one).

    Raises:
        ConfigurationError: the spec is malformed, the import fails or it is no host.
    """
    if os.getcwd() not in sys.path:  # like uvicorn and arq: import the app from the cwd
        sys.path.insert(0, os.getcwd())
    module_name, _, attr = spec.partition(":")
    if not module_name or not attr:
        raise ConfigurationError(f"--app {spec!r}: expected module:attribute, e.g. myapp:host")
    try:
        value = getattr(importlib.import_module(module_name), attr)
        host = value() if callable(value) and not isinstance(value, MessagingHost) else value
    except SharedOSError as exc:
        raise ConfigurationError(f"--app {spec}: {exc}") from exc
    except Exception as exc:  # the user's module: any failure is a start-up error
        raise ConfigurationError(f"--app {spec}: {type(exc).__name__}: {exc}") from exc
    if not isinstance(host, MessagingHost):
        raise ConfigurationError(f"--app {spec} is not a MessagingHost")
    return host


def _check_url(obj: _Ctx, host: MessagingHost) -> None:
    """Refuse a ``--redis-url`` (or ``SHAREDOS_REDIS_URL``) the app does not use."""
    if host.connection is None:
        raise ConfigurationError("the app's host has no connection settings: build it with "
                                 "MessagingHost.from_url or MessagingHost.from_settings")
    if obj.url_given and obj.url != host.connection.url:
        given = RedisSettings(url=obj.url).redacted_url()
        raise ConfigurationError(
            f"--redis-url/SHAREDOS_REDIS_URL is {given} but the app connects to "
            f"{host.connection.redacted_url()}; the worker uses the app's connection, so make "
            "them agree (e.g. build the host with RedisSettings.from_env()) or drop the option")


@main.command()
@click.option("--app", "app", required=True, help="module:attribute of a MessagingHost.")
@click.option("--burst", is_flag=True, help="Stop when the queue is empty.")
@click.option("--metrics-port", type=click.IntRange(1, 65535), default=None,
              envvar="SHAREDOS_METRICS_PORT", help="Serve Prometheus /metrics (metrics extra).")
@click.option("--metrics-host", default="127.0.0.1", show_default=True)
@click.option("--mode", type=click.Choice(["auto", "arq", "streams"]), default="auto",
              show_default=True,
              help="auto: wake turns through the outbox on a Redis Cluster, arq otherwise.")
@pass_ctx
def worker(obj: _Ctx, app: str, burst: bool, metrics_port: int | None,
           metrics_host: str, mode: str) -> None:
    """Run a worker for the host's agents (relay and reconciler included).

    SIGTERM/SIGINT drains (running turns finish within the host's drain_grace_s, the
    rest are handed back) and exits 0; a second signal stops at once (exit 1).
    Start-up errors (bad app or settings, unreachable Redis) are one line, exit 2.
    """
    from .process import serve

    if metrics_port is not None:
        _serve_metrics(metrics_port, metrics_host)
    try:
        host = _load_host(app)
        _check_url(obj, host)
        if metrics_port is not None:
            _redis_gauges(host)
        code = run_loop(serve(host, burst=burst, mode=mode), shutdown_s=5)
    except SharedOSError as exc:
        if obj.verbose:
            raise
        _fail(str(exc), code=2)
    except STORE_ERRORS as exc:
        if obj.verbose:
            raise
        _fail(str(store_unavailable("worker start-up", exc)), code=2)
    sys.exit(code)


def _serve_metrics(port: int, host: str) -> None:
    from ..observability.prometheus import serve_prometheus

    try:
        serve_prometheus(port, host)
    except ModuleNotFoundError as exc:
        _fail(f"{exc.name} is missing: pip install 'sharedos-redis[metrics]'", code=2)
    except OSError as exc:
        _fail(f"cannot serve metrics on {host}:{port}: {exc.strerror}", code=2)


def _redis_gauges(host: MessagingHost) -> None:
    """Pending by state, dead letters, outbox depth and age on the worker's /metrics."""
    from ..console.data import HealthPoller
    from ..observability.gauges import register_gauges

    if host.connection is not None:
        register_gauges(HealthPoller(host.connection, [host.namespace]))


def _table(rows: list[dict[str, Any]], columns: list[str]) -> str:
    if not rows:
        return "(none)"
    cells = [{c: printable(r.get(c, "")) for c in columns} for r in rows]
    widths = {c: max(len(c), *(len(cell[c]) for cell in cells)) for c in columns}
    lines = ["  ".join(c.upper().ljust(widths[c]) for c in columns)]
    lines += ["  ".join(cell[c].ljust(widths[c]) for c in columns) for cell in cells]
    return "\n".join(lines)


@main.command()
@click.option("--state", default=None, help="Only this state (accepted, dispatched, running).")
@click.option("--agent", default=None, help="Only requests from or to this agent id.")
@click.option("--older-than", type=float, default=None, help="Only requests older than S seconds.")
@click.option("--limit", type=click.IntRange(1, 10_000), default=100, show_default=True)
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@pass_ctx
def pending(obj: _Ctx, state: str | None, agent: str | None, older_than: float | None,
            limit: int, as_json: bool) -> None:
    """List open requests (id, from → to, purpose, trace, state, age, deadline, attempts)."""
    namespace = obj.need_namespace()

    async def job(redis: Redis) -> list[dict[str, Any]]:
        router = RedisRequestRouter(redis)
        found = await router.pending(namespace, state=state, agent=agent,
                                     older_than_s=older_than, limit=limit)
        return [record.model_dump(mode="json") for record in found]

    rows = obj.run(job)
    if as_json:
        click.echo(json.dumps(rows, indent=2))
        return
    now_ms = time.time() * 1000
    for row in rows:
        row["age"] = f"{row.get('age_s', 0):.1f}s"
        row["deadline_in"] = f"{(row.get('deadline_ms', now_ms) - now_ms) / 1000:.1f}s"
    click.echo(_table(rows, ["id", "sender", "recipient", "purpose", "trace_id", "state",
                             "age", "deadline_in", "attempts"]))


@main.command()
@click.option("--limit", type=click.IntRange(1, 10_000), default=20, show_default=True)
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@pass_ctx
def recent(obj: _Ctx, limit: int, as_json: bool) -> None:
    """List the last requests that settled, newest first (id, from → to, purpose, state,
    code, settled at)."""
    namespace = obj.need_namespace()

    async def job(redis: Redis) -> list[dict[str, Any]]:
        found = await RedisRequestRouter(redis).recent(namespace, limit=limit)
        return [record.model_dump(mode="json") for record in found]

    rows = obj.run(job)
    if as_json:
        click.echo(json.dumps(rows, indent=2))
        return
    shown = [{key: "-" if value is None else value for key, value in row.items()} for row in rows]
    click.echo(_table(shown, ["id", "sender", "recipient", "purpose", "state", "code",
                              "settled_at"]))


@main.command()
@click.argument("message_id", required=False)
@click.option("--last", is_flag=True, help="The most recently settled request.")
@click.option("--trace", "trace_id", default=None, help="The whole delegation tree of a trace.")
@click.option("--json", "as_json", is_flag=True)
@pass_ctx
def show(obj: _Ctx, message_id: str | None, last: bool, trace_id: str | None,
         as_json: bool) -> None:
    """Print one request's timeline from the audit stream, with its parent and children
    (MESSAGE_ID or --last), or a trace's delegation tree (--trace)."""
    namespace = obj.need_namespace()
    if sum((last, message_id is not None, trace_id is not None)) != 1:
        raise click.UsageError("give one of MESSAGE_ID, --last or --trace")
    if trace_id is not None:
        _show_trace(obj, namespace, trace_id, as_json)
        return

    async def job(redis: Redis) -> tuple[list[dict[str, Any]], list[str]] | None:
        router = RedisRequestRouter(redis)
        wanted = message_id
        if wanted is None:
            newest = await router.recent(namespace, limit=1)
            if not newest:
                return None
            wanted = newest[0].id
        events = await router.timeline(namespace, wanted)
        trace, = await router.markers.fields(namespace, wanted, ("trace",))
        tree = await router.tree(namespace, trace) if trace else None
        links = [] if tree is None else render_links(tree, wanted)
        return [event.to_wire() for event in events], links

    found = obj.run(job)
    if found is None:
        _fail(f"no settled request in namespace {namespace!r}", code=1)
    events, links = found
    if as_json:
        click.echo(json.dumps(events, indent=2))
        return
    rows = [{"at": e["at"], "event": e["type"], "outcome": e["outcome"],
             "actor": f"{e['actor']['kind']}:{list(e['actor'].values())[1]}",
             "reason": e.get("reason", ""),
             "detail": json.dumps(e.get("metadata", {}), separators=(",", ":"))
             if e.get("metadata") else ""} for e in events]
    for line in links:
        click.echo(line)
    click.echo(_table(rows, ["at", "event", "outcome", "actor", "reason", "detail"]))


def _show_trace(obj: _Ctx, namespace: str, trace_id: str, as_json: bool) -> None:
    async def job(redis: Redis) -> DelegationTree:
        return await RedisRequestRouter(redis).tree(namespace, trace_id)

    tree = obj.run(job)
    if as_json:
        click.echo(json.dumps(tree.model_dump(mode="json"), indent=2))
        return
    if not tree.nodes:
        _fail(f"no request of trace {trace_id!r} in namespace {namespace!r}", code=1)
    click.echo("\n".join(render_tree(tree)))


@main.command("dead-letters")
@click.option("--retry", "retry_id", default=None, help="Re-drive this dead request.")
@click.option("--timeout", type=float, default=60.0, show_default=True,
              help="New deadline for a re-driven request, in seconds.")
@click.option("--json", "as_json", is_flag=True)
@pass_ctx
def dead_letters(obj: _Ctx, retry_id: str | None, timeout: float, as_json: bool) -> None:
    """List dead-lettered requests, or re-drive one with --retry ID."""
    namespace = obj.need_namespace()

    async def job(redis: Redis) -> Any:
        if retry_id is not None:  # the sender is authorized again and a hop is spent
            return await redrive_request(redis, namespace, retry_id, timeout_s=timeout)
        return await MarkerStore(redis).dead_letters(namespace)

    result = obj.run(job)
    if retry_id is not None:
        if not result.redriven:
            _fail(f"{retry_id} not re-driven in {namespace}: {result.code}", code=1)
        click.echo(f"re-driven {printable(retry_id)}")
    elif as_json:
        click.echo(json.dumps(result, indent=2))
    else:
        click.echo(_table(result, ["id", "reason", "at"]))


@main.group()
def budget() -> None:
    """Read or set a trace's loop budget (hops left)."""


@budget.command("get")
@click.argument("trace_id")
@pass_ctx
def budget_get(obj: _Ctx, trace_id: str) -> None:
    """Print the hops left for TRACE_ID (or 'unset')."""
    namespace = obj.need_namespace()
    left = obj.run(lambda redis: TraceBudget(redis).get(namespace, trace_id))
    click.echo("unset" if left is None else str(left))


@budget.command("set")
@click.argument("trace_id")
@click.argument("hops", type=click.IntRange(0, 1_000_000))
@pass_ctx
def budget_set(obj: _Ctx, trace_id: str, hops: int) -> None:
    """Set (replenish) the hops left for TRACE_ID."""
    namespace = obj.need_namespace()

    async def job(redis: Redis) -> None:
        await TraceBudget(redis).set(namespace, trace_id, hops)
        await RedisAuditSink(redis).record(budget_set_event(
            namespace, trace_id, hops, actor=service("sharedos-redis-cli")))

    obj.run(job)
    click.echo(f"{printable(trace_id)}: {hops}")


main.add_command(console)

if __name__ == "__main__":  # python -m sharedos_redis.worker.cli
    main()

