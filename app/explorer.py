"""The explorer page: banner on top, module tree and inspector on the left, the graph in the
middle, discharge / doctor / export on the right; served by Panel on loopback."""
from __future__ import annotations

import html
from typing import Any, Callable

import panel as pn

from exporters.model_explorer.server import free_port

from .sources import Loaded
from .state import ExplorerState
from .views.banner import ClaimBanner
from .views.compare import ComparePanel
from .views.discharge import DischargePanel
from .views.doctor import DoctorPanel
from .views.export import ExportPanel
from .views.graph import GraphView
from .views.inspector import Inspector
from .views.tree import ModuleTree

HOST = "127.0.0.1"


def build_app(loaded: Loaded) -> pn.viewable.Viewable:
    """One session's page over a fresh `ExplorerState` of `loaded`."""
    state = ExplorerState(loaded)
    banner = ClaimBanner(state=state)
    graph = GraphView(state=state)
    left = pn.Column(ModuleTree(state=state), Inspector(state=state), width=360, css_classes=["tlx-left"])
    right = pn.Tabs(("Discharge", DischargePanel(state=state)), ("Doctor", DoctorPanel(state=state)),
                    ("Export", ExportPanel(state=state)), ("Compare", ComparePanel(state=state)), width=380, css_classes=["tlx-right"])
    header = pn.Column(
        pn.pane.HTML(f'<div class="tlx-title" style="font:600 20px sans-serif">torchlens-explore &middot; '
                     f'{html.escape(loaded.title)}</div>'),
        banner, sizing_mode="stretch_width",
        styles={"position": "sticky", "top": "0", "z-index": "10", "background": "white"},
    )
    page = pn.Column(header, pn.Row(left, graph, right, sizing_mode="stretch_width"), sizing_mode="stretch_width")
    page.tlx_state = state  # tests and benchmarks reach the session state through the page
    return page


def plain_title(text: str) -> str:
    """`text` for the window title: markup characters dropped (the title is not escaped everywhere)."""
    return "".join(c for c in str(text) if c not in "<>&\"'")[:120]


def serve(loaded: Loaded, port: int = 0, *, threaded: bool = False, on_ready: Callable[[str], None] | None = None) -> Any:
    """Serve the explorer on 127.0.0.1; returns the server (a thread to `.stop()` when threaded).

    Blocks when not threaded. `on_ready(url)` is called once the port is known, before serving.
    """
    port = port or free_port()
    url = f"http://{HOST}:{port}/"
    if on_ready is not None:
        on_ready(url)
    return pn.serve(
        {"/": lambda: build_app(loaded)}, address=HOST, port=port, show=False, threaded=threaded,
        title=f"torchlens-explore: {plain_title(loaded.trace.model_class)}", websocket_origin=[f"{HOST}:{port}", f"localhost:{port}"],
        liveness=True,
    )
