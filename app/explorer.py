"""The explorer page: banner on top (one line once read); below it the module tree (left), the graph filling the rest
of the window (middle), the overview (minimap) and the inspector always in view above the side tabs (right), which
fold to one line while an op is selected. Nothing scrolls the page: each column scrolls on its own. Served by Panel
on loopback."""
from __future__ import annotations

import html
import threading
from typing import Any, Callable, Sequence

import panel as pn

from exporters.model_explorer.server import free_port

from . import activity
from .serving import serve_page
from .sources import Loaded
from .state import ExplorerState
from .urlstate import apply_query, keep_in_url, session_query
from .views.actions import PageActions
from .views.backward import centre_column
from .views.banner import ClaimBanner
from .views.compare import ComparePanel
from .views.discharge import DischargePanel
from .views.doctor import DoctorPanel
from .views.export import ExportPanel
from .views.fold_box import FoldBox
from .views.graph import GraphView
from .views.inspector import Inspector
from .views.memory import MemoryPanel
from .views.ranks import RankSelector
from .views.steps import Built, fill_in_steps
from .views.tree import ModuleTree

LEFT_PX = 300
RIGHT_PX = 400
MAX_GIVE_WAY_S = 10.0  # the next page waits while sessions wait on the server, at most this long
REFILL_DELAY_S = 2.0  # the next page is built this long after one is taken, not while that page is being sent

# The tabs under the inspector, in order: (title, a panel class taking state=). Add a tab by adding a row.
SIDE_TABS: list[tuple[str, Callable[..., Any]]] = [
    ("Discharge", DischargePanel),
    ("Doctor", DoctorPanel),
    ("Export", ExportPanel),
    ("Compare", ComparePanel),
    ("Memory", MemoryPanel),  # training memory per layer (issue 14)
]

PAGE_CSS = """
html, body { margin: 0; padding: 0; height: 100%; overflow: hidden; }
"""


class PageParts:
    """The parts of one session's page that need no browser session: its state and its views."""

    def __init__(self, loaded: Loaded, query: dict[str, str] | None = None) -> None:
        self.state = ExplorerState(loaded)
        if query:
            apply_query(self.state, query)  # a link with a view reopens it
        self.banner = ClaimBanner(state=self.state)
        self.graph = GraphView(state=self.state)
        self.tree = ModuleTree(state=self.state)
        self.graph.actions.on("tree", self.tree.open)
        self.inspector = Inspector(state=self.state)
        self.ranks = RankSelector(state=self.state)  # a sharded trace's rank selector (issue 16); empty otherwise


class PagePool:
    """One page's parts built ahead on a background thread, so a plain page load (no view in its URL)
    only attaches them to its session; a page taken starts building the next a little later (building
    it at once would take the interpreter from the page being sent)."""

    def __init__(self, loaded: Loaded, ready: PageParts | None = None) -> None:
        self.loaded = loaded
        self._ready: PageParts | None = ready  # parts built already (app.progress builds the first at start-up)
        self._lock = threading.Lock()
        if ready is None:
            self._refill()

    def _refill(self, delay_s: float = 0.0) -> None:
        def build() -> None:
            activity.wait_until_quiet(MAX_GIVE_WAY_S)  # a page's click goes first
            parts = PageParts(self.loaded)
            with self._lock:
                self._ready = parts

        worker = threading.Timer(delay_s, build)  # after a page is taken: once that page has been sent
        worker.name, worker.daemon = "tlx-next-page", True
        worker.start()

    def take(self, query: dict[str, str]) -> PageParts:
        """Parts for a new session: the ready ones for a plain load, else built now."""
        if query:
            return PageParts(self.loaded, query)
        with self._lock:
            parts, self._ready = self._ready, None
        if parts is None:
            return PageParts(self.loaded)
        self._refill(REFILL_DELAY_S)
        return parts


def build_app(loaded: Loaded, pool: PagePool | None = None) -> pn.viewable.Viewable:
    """One session's page over a fresh `ExplorerState` of `loaded` (its parts from `pool` when given)."""
    if PAGE_CSS not in pn.config.global_css:  # per session when served: the page itself never scrolls
        pn.config.global_css = [*pn.config.global_css, PAGE_CSS]
    query = session_query()
    parts = pool.take(query) if pool is not None else PageParts(loaded, query)
    state, graph = parts.state, parts.graph
    state.document = pn.state.curdoc  # this session's: its views change the page on its ticks from now on
    scroll = {"overflow-y": "auto", "overflow-x": "hidden"}
    left = pn.Column(parts.tree, width=LEFT_PX, sizing_mode="stretch_height", css_classes=["tlx-left"])
    inspector = pn.Column(parts.inspector, sizing_mode="stretch_width", css_classes=["tlx-inspector-panel"],
                          styles={**scroll, **INSPECTOR_ROOM[False], "border-bottom": "1px solid #ddd"})
    right = pn.Column(inspector, width=RIGHT_PX, sizing_mode="stretch_height", css_classes=["tlx-right"])
    graph.actions.on("banner", parts.banner.open)  # a click on the one-line banner shows it in full

    def add_tabs() -> None:  # after the graph is on screen, a piece per tick: other sessions answer between
        right.insert(0, graph.overview())
        fill_in_steps(right, [Built(lambda: side_tools(state, inspector, graph.actions))])

    pn.state.onload(add_tabs)
    name = html.escape(loaded.title)
    title = pn.pane.HTML(f'<div class="tlx-title" style="font:600 18px sans-serif;padding-top:6px">torchlens-explore'
                         f'<div title="{name}" style="font-weight:400;font-size:13px;white-space:nowrap;overflow:hidden;'
                         f'text-overflow:ellipsis">{name}</div></div>', width=LEFT_PX - 10)
    header = pn.Row(title, parts.banner, parts.ranks, sizing_mode="stretch_width", css_classes=["tlx-header"])
    centre = centre_column(graph, state)  # the graph, under a Forward/Backward switch when there is a backward
    body = pn.Row(left, centre, right, sizing_mode="stretch_both", styles={"min-height": "0"}, css_classes=["tlx-body"])
    page = pn.Column(header, body, sizing_mode="stretch_both", css_classes=["tlx-page"],
                     styles={"height": "100vh", "overflow": "hidden"})
    keep_in_url(state)
    page.tlx_state = state  # tests and benchmarks reach the session state through the page
    page.tlx_graph = graph
    page.tlx_centre = centre
    return page


TOOLS_TITLE = " \u00b7 ".join(title for title, _ in SIDE_TABS)
# The right column's split (issue 36 item 4): with the tools folded the inspector takes what it needs of the
# column; with them open it takes at most 45% and the tabs the rest (each part scrolls on its own).
INSPECTOR_ROOM = {True: {"flex": "0 1 auto", "max-height": "none"}, False: {"flex": "0 1 auto", "max-height": "45%"}}
TOOLS_ROOM = {True: {"flex": "0 0 auto", "min-height": "0"}, False: {"flex": "1 1 0", "min-height": "160px"}}


def side_tools(state: ExplorerState, inspector: pn.Column, actions: PageActions) -> FoldBox:
    """The side tabs under a title line; they fold to that line when an op is selected (the inspector then
    has the column) and open again on a click on it."""
    tabs = side_tabs(state, styles={"overflow-y": "auto", "overflow-x": "hidden", "flex": "1 1 0", "min-height": "0"})
    tools = FoldBox(tabs, TOOLS_TITLE, actions=actions, verb="tools", css_classes=["tlx-tools"],
                    collapsed=bool(state.selected))

    def fold(collapsed: bool) -> None:
        tools.box.styles = {"overflow": "hidden", **TOOLS_ROOM[collapsed]}
        inspector.styles = {**inspector.styles, **INSPECTOR_ROOM[collapsed]}

    tools.param.watch(lambda event: fold(event.new), "collapsed")

    def selected(event: Any) -> None:
        keep, state.keep_tools_open = state.keep_tools_open, False  # asked for this one selection only
        if event.new and not keep:
            tools.collapsed = True

    state.param.watch(selected, "selected")
    fold(tools.collapsed)
    return tools


def side_tabs(state: ExplorerState, styles: dict[str, str]) -> pn.Tabs:
    """The side tabs, each built when first shown: the open one at the next tick, the others on their first click
    (a page that never opens the Doctor never builds it, and a fresh page holds the server's loop for less)."""
    holders = [pn.Column(sizing_mode="stretch_width") for _ in SIDE_TABS]
    built: set[int] = set()

    def show(index: int) -> None:
        if index not in built and 0 <= index < len(holders):
            built.add(index)
            make = SIDE_TABS[index][1]
            fill_in_steps(holders[index], [Built(lambda: make(state=state))])

    tabs = pn.Tabs(*[(title, holder) for (title, _), holder in zip(SIDE_TABS, holders)], sizing_mode="stretch_width",
                   dynamic=True, css_classes=["tlx-tabs"], styles=styles)
    tabs.param.watch(lambda event: show(event.new), "active")
    show(tabs.active)
    return tabs


def plain_title(text: str) -> str:
    """`text` for the window title: markup characters dropped (the title is not escaped everywhere)."""
    return "".join(c for c in str(text) if c not in "<>&\"'")[:120]


def serve(loaded: Loaded, port: int = 0, *, threaded: bool = False, on_ready: Callable[[str], None] | None = None,
          allowed_hosts: Sequence[str] = ()) -> Any:
    """Serve the explorer on 127.0.0.1; returns the server (a thread to `.stop()` when threaded).

    Blocks when not threaded. `on_ready(url)` is called once the port is known, before serving.
    Every request must name 127.0.0.1, localhost or [::1] on `port` (or one of `allowed_hosts`,
    `name` or `name:port`) as its Host, and a websocket that Origin (app.http_guard; app.serving).
    """
    activity.install()  # work nobody waits for gives way to a session's click (app.activity)
    pool = PagePool(loaded)  # the next page's parts are built while nobody waits for them
    return serve_page(lambda: build_app(loaded, pool), f"torchlens-explore: {plain_title(loaded.trace.model_class)}",
                      port, threaded=threaded, on_ready=on_ready, allowed_hosts=allowed_hosts)
