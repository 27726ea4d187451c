"""The page a session gets while the explorer is starting: what is being built, then the explorer itself.

`serve_startup(startup, ...)` serves at once. A session opened before the work is done gets a light
page listing the stages (`app.startup.STAGE_TEXT`: done with its seconds, the current one, those to
come), refreshed by a periodic callback on the session's own loop; when the work is done the same
callback puts the explorer's page (`app.explorer.build_app`) in its place, or a refusal's code, site
and remedy. The swap waits until the browser has shown the start-up page (Panel's onload): a session no
browser renders (a bare GET of the URL) neither builds an explorer nobody sees nor takes the page built
ahead for the first browser, and no change is sent to a browser still receiving the document (Bokeh's
"reference ... isn't known", seen when the swap came as the websocket opened). A session
opened after that gets the explorer (or the refusal) directly. Nothing here
imports torch or the explorer's views until the work has finished.
"""
from __future__ import annotations

import html
import threading
import time
from typing import Any, Callable, Sequence

import panel as pn

from .startup import STAGE_TEXT, Snapshot, Startup, refusal_lines

POLL_MS = 200
PAGE_TITLE = "torchlens-explore"
PAGE_CSS = "html, body { margin: 0; padding: 0; height: 100%; overflow: hidden; }"
PANE_CSS = """
.tlx-progress { font: 14px sans-serif; padding: 32px 40px; color: #222; }
.tlx-progress h1 { font: 600 20px sans-serif; margin: 0 0 4px 0; }
.tlx-progress .what { color: #555; margin-bottom: 18px; }
.tlx-progress li { list-style: none; margin: 4px 0; }
.tlx-progress .done { color: #2a7a2a; } .tlx-progress .now { font-weight: 600; } .tlx-progress .later { color: #999; }
.tlx-refusal { margin-top: 18px; padding: 12px 16px; border: 1px solid #c33; background: #fff4f4; color: #811;
  white-space: pre-wrap; font: 13px monospace; max-width: 900px; }
"""


def progress_html(snap: Snapshot, what: str) -> str:
    """The start-up page's markup for `snap` (escaped; `data-stage` names the current stage for tests)."""
    rows = []
    for key, seconds in snap.stages:
        text = html.escape(STAGE_TEXT.get(key, key))
        if key == snap.current:
            rows.append(f'<li class="now" data-key="{key}">&#9656; {text} &hellip; {seconds or 0:.1f} s</li>')
        elif seconds is not None:
            rows.append(f'<li class="done" data-key="{key}">&#10003; {text} ({seconds:.1f} s)</li>')
        else:
            rows.append(f'<li class="later" data-key="{key}">&middot; {text}</li>')
    state = "refused" if snap.error is not None else "ready" if snap.done else (snap.current or "starting")
    body = (f'<div class="tlx-progress" data-stage="{html.escape(state)}"><h1>torchlens-explore</h1>'
            f'<div class="what">opening {html.escape(what)} &middot; {snap.elapsed_s:.1f} s</div><ul>{"".join(rows)}</ul>')
    if snap.error is not None:
        body += f'<div class="tlx-refusal">{html.escape(chr(10).join(refusal_lines(snap.error)))}</div>'
    return body + "</div>"


class StartupPages:
    """Makes each session's page over one `Startup`; `explorer_page(loaded)` builds the explorer once loaded."""

    def __init__(self, startup: Startup, what: str, explorer_page: Callable[[Any], Any]) -> None:
        self.startup = startup
        self.what = what
        self.explorer_page = explorer_page

    def __call__(self) -> pn.viewable.Viewable:
        if PAGE_CSS not in pn.config.global_css:
            pn.config.global_css = [*pn.config.global_css, PAGE_CSS]
        snap = self.startup.snapshot()
        if snap.done and snap.error is None:
            page = self.explorer_page(snap.loaded)
            _retitle(snap.loaded)
            return page
        pane = pn.pane.HTML(progress_html(snap, self.what), sizing_mode="stretch_width", stylesheets=[PANE_CSS])
        holder = pn.Column(pane, sizing_mode="stretch_both", css_classes=["tlx-startup"],
                           styles={"height": "100vh", "overflow": "hidden"})
        if snap.done:
            return holder
        callback: list[Any] = []
        shown: list[bool] = []
        pn.state.onload(lambda: shown.append(True))  # the browser has the document and has rendered it

        def tick() -> None:
            now = self.startup.snapshot()
            if now.done and now.error is None:
                if not shown:
                    return  # swapped once a browser shows this page (the callback keeps ticking until then)
                callback[0].stop()
                page = self.explorer_page(now.loaded)
                holder.objects = [page]
                holder.tlx_page = page  # tests reach the explorer's page (its state) through the holder
                return
            pane.object = progress_html(now, self.what)
            if now.done:
                callback[0].stop()

        callback.append(pn.state.add_periodic_callback(tick, period=POLL_MS))
        return holder


def _retitle(loaded: Any) -> None:
    """Name the model in the window's title once the page is in the browser (Panel renders its page
    with the served title; a document title set later does not reach the window on its own)."""
    import json

    from bokeh.models import CustomJS

    from .explorer import plain_title

    doc = pn.state.curdoc
    if doc is not None:
        title = json.dumps(f"torchlens-explore: {plain_title(loaded.trace.model_class)}")
        doc.js_on_event("document_ready", CustomJS(code=f"document.title = {title};"))


def serve_startup(startup: Startup, what: str, explorer_page: Callable[[Any], Any], port: int = 0, *,
                  threaded: bool = False, on_ready: Callable[[str], None] | None = None,
                  allowed_hosts: Sequence[str] = (), on_done: Callable[[Startup], None] | None = None,
                  linger_s: float | None = None) -> Any:
    """Serve the start-up page now and begin `startup` once the server listens (at once when `threaded`).

    Not threaded: `on_ready(url)` is called once the server listens, `on_done(startup)` is called (on a watcher thread) when the work is done, and a start-up
    that did not load stops the server `linger_s` seconds later (None: it keeps serving its refusal), so
    the call returns and the command can exit with `startup.exit_code()`.
    """
    from . import activity
    from .serving import HOST, free_loopback_port, serve_page

    activity.install()  # work nobody waits for gives way to a session's click (app.activity)
    if threaded:
        startup.start()
    else:
        from tornado.ioloop import IOLoop

        port = port or free_loopback_port()
        loop = IOLoop.current()
        if on_ready is not None:  # the URL is printed (and a browser opened) once the server answers it
            loop.add_callback(on_ready, f"http://{HOST}:{port}/")
            on_ready = None
        loop.add_callback(startup.start)  # runs once the loop (and so the listening server) runs

        def watch() -> None:
            startup.wait()
            if on_done is not None:
                on_done(startup)
            if startup.error is not None and linger_s is not None:
                time.sleep(linger_s)  # open pages have been sent the refusal; new ones get it meanwhile
                loop.add_callback(loop.stop)

        threading.Thread(target=watch, name="tlx-startup-watch", daemon=True).start()
    pages = StartupPages(startup, what, explorer_page)
    return serve_page(lambda: pages(), PAGE_TITLE, port, threaded=threaded,  # Panel calls functions, not callables
                      on_ready=on_ready, allowed_hosts=allowed_hosts)
