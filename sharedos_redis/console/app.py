"""The read-only web console: a Starlette app rendering Jinja2 templates on the server.

Pages: namespaces' health (``/``), the pending table with filters and a meta-refresh
(``/pending``), one request's record and timeline (``/request``), a trace's
delegation tree as an SVG picture (``/trace``), dead letters (``/dead``) and, with
the ``metrics`` extra, Prometheus ``/metrics``. Nothing changes state: GET only.
Every value goes through :func:`.inert.inert` and HTML autoescaping; the pages run
no script (``Content-Security-Policy`` forbids it). With a ``token``, every request
must carry it (``Authorization: Bearer``, or ``?token=`` once, which sets a cookie).
"""

from __future__ import annotations

import hmac
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from jinja2 import Environment, PackageLoader, StrictUndefined
from redis.asyncio import Redis
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response
from starlette.routing import Route

from ..errors import SharedOSError
from ..store.keys import OPEN_STATES
from . import data
from .inert import inert
from .tree import NODE_H, NODE_W

__all__ = ["ConsoleSettings", "create_app"]

_COOKIE = "sharedos_console"
_HEADERS = {
    "Content-Security-Policy": "default-src 'none'; style-src 'unsafe-inline'; "
                               "form-action 'self'; frame-ancestors 'none'; base-uri 'none'",
    "X-Content-Type-Options": "nosniff", "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-store",
}
_ENV = Environment(loader=PackageLoader("sharedos_redis.console", "templates"),
                   autoescape=True, finalize=inert, undefined=StrictUndefined)
_ENV.globals.update(NODE_W=NODE_W, NODE_H=NODE_H)

Handler = Callable[[Request], Awaitable[Response]]


class ConsoleSettings:
    """What the console serves.

    Args:
        namespaces: the namespaces shown (any other is a 404).
        token: required on every request when set.
        refresh_s: the pending page's refresh period (0: none).
        metrics: serve ``/metrics`` (needs the ``metrics`` extra).
    """

    def __init__(self, namespaces: Sequence[str], *, token: str | None = None,
                 refresh_s: int = 5, metrics: bool = False) -> None:
        self.namespaces, self.token = tuple(namespaces), token
        self.refresh_s, self.metrics = refresh_s, metrics


def _page(name: str, status: int = 200, **context: Any) -> HTMLResponse:
    html = _ENV.get_template(name).render(**context)
    return HTMLResponse(html, status_code=status, headers=_HEADERS)


def _float(value: str | None) -> float | None:
    try:
        return float(value) if value else None
    except ValueError:
        return None


class _Console:
    """The handlers of one console app."""

    def __init__(self, redis: Redis, settings: ConsoleSettings) -> None:
        self.redis, self.settings = redis, settings
        self.snapshots: list[data.Health] = []

    def namespace(self, request: Request) -> str:
        ns = request.query_params.get("ns") or self.settings.namespaces[0]
        return ns if ns in self.settings.namespaces else ""

    def page(self, name: str, status: int = 200, **context: Any) -> HTMLResponse:
        return _page(name, status, namespaces=self.settings.namespaces, **context)

    def guarded(self, handler: Handler) -> Handler:
        async def endpoint(request: Request) -> Response:
            if self.settings.token is not None:
                denied = _authorize(request, self.settings.token)
                if denied is not None:
                    return denied
            if not self.namespace(request):
                return self.page("error.html", 404, message="unknown namespace")
            try:
                return await handler(request)
            except SharedOSError as exc:
                return self.page("error.html", 503, message=str(exc))
        return endpoint

    async def home(self, request: Request) -> Response:
        found = [await data.health(self.redis, ns) for ns in self.settings.namespaces]
        return self.page("health.html", rows=found)

    async def pending(self, request: Request) -> Response:
        q, ns = request.query_params, self.namespace(request)
        state = q.get("state") if q.get("state") in OPEN_STATES else None
        rows = await data.pending(self.redis, ns, state=state, agent=q.get("agent") or None,
                                  older_than_s=_float(q.get("older_than")))
        refresh = self.settings.refresh_s if q.get("refresh", "1") != "0" else 0
        return self.page("pending.html", ns=ns, rows=rows, state=state or "",
                         agent=q.get("agent") or "", older_than=q.get("older_than") or "",
                         refresh=refresh, states=sorted(OPEN_STATES))

    async def request(self, request: Request) -> Response:
        ns, message_id = self.namespace(request), request.query_params.get("id", "")
        record, events = await data.request_view(self.redis, ns, message_id)
        if record is None and not events:
            return self.page("error.html", 404, message="no such request")
        return self.page("request.html", ns=ns, message_id=message_id, record=record,
                         events=events)

    async def trace(self, request: Request) -> Response:
        ns, trace_id = self.namespace(request), request.query_params.get("id", "")
        tree = await data.trace_tree(self.redis, ns, trace_id)
        return self.page("trace.html", ns=ns, trace_id=trace_id, tree=tree)

    async def dead(self, request: Request) -> Response:
        ns = self.namespace(request)
        return self.page("dead.html", ns=ns, rows=await data.dead_letters(self.redis, ns))

    async def metrics(self, request: Request) -> Response:
        from ..observability.prometheus import prometheus_text

        self.snapshots[:] = [await data.health(self.redis, ns) for ns in self.settings.namespaces]
        body, content_type = prometheus_text()
        return Response(body, media_type=content_type, headers={"Cache-Control": "no-store"})


def create_app(redis: Redis, settings: ConsoleSettings) -> Starlette:
    """The console over ``redis`` (the caller owns and closes the client).

    Raises:
        ModuleNotFoundError: ``settings.metrics`` without the ``metrics`` extra.
    """
    console = _Console(redis, settings)
    routes = [Route(path, console.guarded(handler)) for path, handler in (
        ("/", console.home), ("/pending", console.pending), ("/request", console.request),
        ("/trace", console.trace), ("/dead", console.dead))]
    if settings.metrics:
        from ..observability.gauges import register_gauges
        from ..observability.prometheus import install_prometheus

        install_prometheus()
        register_gauges(lambda: console.snapshots)
        routes.append(Route("/metrics", console.guarded(console.metrics)))
    return Starlette(routes=routes)


def _authorize(request: Request, token: str) -> Response | None:
    """None when the request carries ``token``; else a 401 (or the cookie-setting redirect)."""
    offered = request.query_params.get("token")
    if offered is not None and hmac.compare_digest(offered.encode(), token.encode()):
        target = request.url.remove_query_params("token")
        response = RedirectResponse(str(target.path) + (f"?{target.query}" if target.query
                                                        else ""), status_code=303)
        response.set_cookie(_COOKIE, token, httponly=True, samesite="strict")
        return response
    header = request.headers.get("authorization", "")
    bearer = header[7:] if header.lower().startswith("bearer ") else ""
    cookie = request.cookies.get(_COOKIE, "")
    for candidate in (bearer, cookie):
        if candidate and hmac.compare_digest(candidate.encode(), token.encode()):
            return None
    return Response("unauthorized\n", status_code=401, media_type="text/plain",
                    headers={"WWW-Authenticate": "Bearer"})
