"""The self-contained explorer page inline in a notebook: an object whose `_repr_html_` is an iframe.

The page is the one `exporters.html` writes, passed as the iframe's `srcdoc`, so it needs no server,
no kernel round trip and no network; it shows in JupyterLab, classic Notebook, VS Code and in a
notebook saved as HTML.
"""
from __future__ import annotations

from typing import Mapping

from tracer.ir import Trace

from . import markup
from .html import html_document


class ExplorerView:
    """An inline explorer of one trace; display it (last expression of a cell) or call `save`."""

    def __init__(self, page: str, height: int = 720) -> None:
        self.page = page
        self.height = int(height)

    def _repr_html_(self) -> str:
        return (f'<iframe class="tlx-explorer" srcdoc="{markup.attr(self.page)}" '
                f'style="width:100%;height:{self.height}px;border:1px solid #d7dde6" '
                'sandbox="allow-scripts" title="torchlens-explore"></iframe>')

    def save(self, path, *, follow_symlinks: bool = False) -> None:
        """Write the page as a standalone HTML file (atomically; a symbolic link only with `follow_symlinks`)."""
        from tracer.atomic_write import write_atomic

        from .errors import HtmlWriteError

        write_atomic(path, self.page.encode("utf-8"), error=HtmlWriteError, follow_symlinks=follow_symlinks,
                     what="the HTML file")


def explore(trace: Trace, *, overlay: Mapping[str, float] | None = None, title: str | None = None,
            height: int = 720) -> ExplorerView:
    """The explorer of `trace` for a notebook cell (graph, search, inspector, banner, overlays), offline."""
    return ExplorerView(html_document(trace, overlay=overlay, title=title), height)
