"""``sharedos-redis console``: serve the read-only web console (the ``console`` extra).

Binds 127.0.0.1 by default; any other address requires ``--token``. Parses options
and runs uvicorn; the pages are in :mod:`.app`.
"""

from __future__ import annotations

import ipaddress

import click

__all__ = ["console"]


def _loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


@click.command()
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to bind.")
@click.option("--port", type=click.IntRange(1, 65535), default=8080, show_default=True)
@click.option("--token", envvar="SHAREDOS_CONSOLE_TOKEN", default=None,
              help="Required on every request (Bearer header or ?token= once).")
@click.option("--refresh", type=click.IntRange(0, 3600), default=5, show_default=True,
              help="Pending page refresh period in seconds (0: none).")
@click.option("--metrics", is_flag=True, help="Serve Prometheus /metrics (metrics extra).")
@click.pass_context
def console(ctx: click.Context, host: str, port: int, token: str | None, refresh: int,
            metrics: bool) -> None:
    """Serve the read-only web console for --namespace (comma-separated for several)."""
    namespaces = [ns for ns in (ctx.obj.namespace or "").split(",") if ns]
    if not namespaces:
        raise click.UsageError("--namespace (or SHAREDOS_NAMESPACE) is required")
    if not _loopback(host) and not token:
        raise click.UsageError(f"binding {host} needs --token (or SHAREDOS_CONSOLE_TOKEN)")
    try:
        import uvicorn

        from ..store.client import create_redis
        from .app import ConsoleSettings, create_app
    except ModuleNotFoundError as exc:
        raise click.ClickException(
            f"{exc.name} is missing: pip install 'sharedos-redis[console]'") from None
    redis = create_redis(ctx.obj.connection())  # SHAREDOS_REDIS_* and --redis-url
    try:
        app = create_app(redis, ConsoleSettings(namespaces, token=token, refresh_s=refresh,
                                                metrics=metrics))
    except ModuleNotFoundError as exc:
        raise click.ClickException(
            f"{exc.name} is missing: pip install 'sharedos-redis[metrics]'") from None
    click.echo(f"console on http://{host}:{port}/ for {', '.join(namespaces)}", err=True)
    uvicorn.run(app, host=host, port=port, log_level="warning")
