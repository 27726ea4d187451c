"""Serve one page factory on 127.0.0.1 behind the Host/Origin guard, importing nothing heavy first.

`serve_page` is what `app.explorer.serve` and the start-up page (`app.progress`) both call: it needs
Panel, Tornado and `app.http_guard`, not torch, the tracer's capture or the explorer's views, so the
command's server can answer before those are imported.
"""
from __future__ import annotations

import socket
from typing import Any, Callable, Sequence

from tracer.errors import InvalidInputError

HOST = "127.0.0.1"


def free_loopback_port() -> int:
    """A TCP port free on 127.0.0.1 right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((HOST, 0))
        return sock.getsockname()[1]


def serve_page(make_page: Callable[[], Any], title: str, port: int = 0, *, threaded: bool = False,
               on_ready: Callable[[str], None] | None = None, allowed_hosts: Sequence[str] = ()) -> Any:
    """Serve `make_page()` (one call per session) at `/` on 127.0.0.1:`port` (0: a free port), titled `title`.

    Blocks unless `threaded` (then returns the stoppable server thread). `on_ready(url)` is called once
    the port is known, before serving. Requests must name 127.0.0.1, localhost or [::1] on the port (or
    one of `allowed_hosts`) as Host, and a websocket that Origin (app.http_guard).
    """
    from exporters.http_policy import HostPolicy, valid_host_name

    port = port or free_loopback_port()
    bad = [h for h in allowed_hosts if not valid_host_name(h)]
    if bad:
        raise InvalidInputError(f"allowed host {bad[0]!r} is not a host name", site="serve(allowed_hosts=...)",
                                remedy="Pass plain names such as 'mybox.local' or 'mybox.local:8080'.")
    policy = HostPolicy.loopback(port, allowed_hosts)
    if on_ready is not None:
        on_ready(f"http://{HOST}:{port}/")
    from .http_guard import serve_guarded

    return serve_guarded({"/": make_page}, address=HOST, port=port, threaded=threaded, policy=policy, title=title,
                         websocket_origin=sorted(h for h in policy.hosts if "[" not in h),  # Bokeh's own check too (it cannot parse [::1])
                         liveness=True)
