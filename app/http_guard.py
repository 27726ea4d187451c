"""The explorer's Tornado server answers only its own Host and Origin, and imports nothing a request names.

`guard(tornado_app, policy)` puts one rule in front of every route of the Bokeh/Panel application
(Tornado asks its `default_router` rules in order, the app's own routes come after): a request the
policy refuses (`exporters.http_policy.refusal`: wrong Host, foreign or missing websocket Origin,
a cross-site subresource) is answered 421/403 by `Refused` before any of Bokeh's or Panel's handlers
is built, whatever `Sec-Fetch-Site` says. It also removes Panel's `/components/<module>/...` route,
which imports the module a URL names; the explorer's page loads none of its resources from it. It adds
the route of the page's downloads (`app.downloads`: a token issued to a session, nothing a request names). And
every answer (the page, static files, refusals, the websocket's upgrade) passes through
`SecurityHeaders`, an output transform of the application, which sets
`exporters.http_policy.security_headers()` (CSP, no framing, nosniff, no Referer).
"""
from __future__ import annotations

from typing import Any

from tornado.httputil import HTTPServerRequest
from tornado.routing import Matcher, Rule
from tornado.web import Application, OutputTransform, RequestHandler

from exporters.http_policy import HostPolicy, refusal, security_headers

HEADERS = security_headers()


class _RefusedBy(Matcher):
    """Matches the requests `policy` refuses (and keeps the reason for the handler)."""

    def __init__(self, policy: HostPolicy) -> None:
        self.policy = policy

    def match(self, request: HTTPServerRequest) -> dict[str, Any] | None:
        why = refusal(self.policy, request.headers.get_list)
        if why is None:
            return None
        return {"path_args": [], "path_kwargs": {"status": str(why[0]), "reason": why[1]}}


class Refused(RequestHandler):
    """Answers a refused request with its status and a one-line reason, for every method."""

    def prepare(self) -> None:
        status = int(self.path_kwargs.get("status", "403"))
        self.set_status(status)
        self.set_header("Content-Type", "text/plain; charset=utf-8")
        self.set_header("Cache-Control", "no-store")
        self.finish(self.path_kwargs.get("reason", "refused") + "\n")

    def check_xsrf_cookie(self) -> None:  # nothing to protect: the request is refused in prepare
        return


class SecurityHeaders(OutputTransform):
    """Adds the security headers to every response of the application, whatever handler wrote it."""

    def transform_first_chunk(self, status_code: int, headers: Any, chunk: bytes, finishing: bool
                              ) -> tuple[int, Any, bytes]:
        for name, value in HEADERS.items():
            headers[name] = value
        return status_code, headers, chunk


class _LongQuery(Matcher):
    """Matches a page GET whose URL query is past `app.urlstate.MAX_QUERY_CHARS` (Bokeh would copy it
    into the websocket's URL, whose upgrade then fails and the page never renders)."""

    def match(self, request: HTTPServerRequest) -> dict[str, Any] | None:
        from .urlstate import MAX_QUERY_CHARS

        if request.method != "GET" or len(request.query) <= MAX_QUERY_CHARS or request.path.startswith(("/ws", "/static")):
            return None
        return {"path_args": [], "path_kwargs": {"size": str(len(request.query))}}


class WithoutView(RequestHandler):
    """Sends a too-long link to the same page with only a note of what was dropped (`ignored=N`)."""

    def prepare(self) -> None:
        self.set_header("Cache-Control", "no-store")
        self.redirect(f"{self.request.path}?ignored={int(self.path_kwargs.get('size', '0'))}", status=303)


class NotServed(RequestHandler):
    """Answers Panel's component-resource URLs with 404 without importing anything."""

    def prepare(self) -> None:
        self.set_status(404)
        self.set_header("Content-Type", "text/plain; charset=utf-8")
        self.finish("component resources are not served by this app\n")

    def check_xsrf_cookie(self) -> None:
        return


def guard(app: Application, policy: HostPolicy) -> None:
    """Refuse what `policy` refuses before every route of `app`; serve no module-resolved resources.

    Call it before the server's IO loop runs (no request is handled before the rule is in place).
    """
    if SecurityHeaders not in app.transforms:
        app.transforms.append(SecurityHeaders)  # read per request: every handler's answer gets the headers
    app.default_router.rules.insert(0, Rule(_RefusedBy(policy), Refused))
    app.default_router.rules.insert(1, Rule(_LongQuery(), WithoutView))  # after the Host/Origin check
    from tornado.routing import PathMatches

    from .downloads import PATTERN, DownloadHandler

    app.default_router.rules.insert(2, Rule(PathMatches(PATTERN), DownloadHandler))  # exports by token (app.downloads)
    from panel.io.server import ComponentResourceHandler

    for rule in app.wildcard_router.rules:
        if isinstance(rule.target, type) and issubclass(rule.target, ComponentResourceHandler):
            rule.target, rule.target_kwargs = NotServed, {}


def guarded(app: Application) -> bool:
    """True when `guard` has put its rule in front of `app`'s routes."""
    return bool(app.default_router.rules) and isinstance(app.default_router.rules[0].matcher, _RefusedBy)


def serve_guarded(panels: dict, *, port: int, address: str, policy: HostPolicy, threaded: bool = False,
                  **kwargs: Any) -> Any:
    """`pn.serve` with `guard` installed before the IO loop runs; blocks unless `threaded`.

    Threaded, it returns Panel's stoppable thread (`.stop()`); else the Bokeh server once stopped.
    """
    if not threaded:
        return _run(panels, port=port, address=address, policy=policy, **kwargs)
    import uuid

    from panel.io.state import state
    from panel.io.threads import StoppableThread
    from tornado.ioloop import IOLoop

    loop = IOLoop(make_current=False)
    server_id = uuid.uuid4().hex
    thread = StoppableThread(target=_run, io_loop=loop, owns_loop=True, args=(panels,),
                             kwargs=dict(kwargs, port=port, address=address, policy=policy, loop=loop,
                                         server_id=server_id))
    state._threads[server_id] = thread  # as pn.serve does: Panel's own shutdown finds the thread
    thread.start()
    return thread


def _run(panels: dict, *, policy: HostPolicy, **kwargs: Any) -> Any:
    from panel.io.server import get_server

    server = get_server(panels, start=False, show=False, **kwargs)
    guard(server._tornado, policy)  # before the loop runs: no request is handled unguarded
    server.start()
    try:
        server.io_loop.start()
    except RuntimeError:  # a loop already running (as pn.serve tolerates)
        pass
    return server
