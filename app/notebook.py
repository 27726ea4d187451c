"""The explorer in a notebook cell: `tracer.explore(trace)` resolves here (entry point `explore`).

By default the self-contained page (`exporters.notebook`): graph, search, inspector, banner and
overlays in an iframe that needs no server, no kernel round trip and no network, and stays
interactive in a notebook saved as HTML. With `live=True`, the app's own Panel components (module
tree, graph, inspector, banner, discharge, doctor, export) bound to the kernel through Panel's
notebook support, with every asset inline (no CDN).
"""
from __future__ import annotations

from typing import Any, Mapping


def explore(trace: Any, *, live: bool = False, overlay: Mapping[str, float] | None = None,
            title: str | None = None, height: int = 720) -> Any:
    """The explorer of `trace` for a notebook cell (display it as the cell's last expression)."""
    if not live:
        from exporters.notebook import explore as static_explore

        return static_explore(trace, overlay=overlay, title=title, height=height)
    import panel as pn

    from .explorer import build_app
    from .sources import Loaded

    pn.extension(inline=True)  # assets travel in the output: nothing fetched from a CDN
    return build_app(Loaded(trace, title or f"{trace.model_class} (notebook)", "notebook", "notebook"))
