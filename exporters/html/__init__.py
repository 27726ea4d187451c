"""A trace as one self-contained HTML file: no server, no network, every script and style inline.

The page (page.js, page.css beside this module) draws precomputed layouts as SVG: expand and
collapse modules (one open path at a time), search ops, an inspector, the claim banner and an
overlay selector with a legend. Its data is gzip-compressed JSON in base64, unpacked in the browser
with `DecompressionStream` (Chromium 80+, Firefox 113+, Safari 16.4+). Every name from the trace is
set as text, never parsed as markup.
"""
from __future__ import annotations

import base64
import gzip
from importlib import resources
from pathlib import Path
from typing import Mapping

from .. import markup
from ..errors import HtmlWriteError
from tracer.atomic_write import resolve_target, write_atomic
from tracer.gc_policy import gc_paused
from tracer.ir import Trace

from .data import page_data, to_json

__all__ = ["HtmlWriteError", "html_document", "write_html"]


def html_document(trace: Trace, *, overlay: Mapping[str, float] | None = None, title: str | None = None) -> str:
    """The whole page as a string; `overlay` adds a user overlay `{op label or module path: number}`."""
    with gc_paused():  # ~10^6 short-lived acyclic tuples: the collector would only rescan the trace
        data = page_data(trace, overlay=overlay, title=title)
        text = to_json(data)
    packed = base64.b64encode(gzip.compress(text.encode("utf-8"), compresslevel=6, mtime=0)).decode("ascii")
    asset = resources.files(__name__)
    css = asset.joinpath("page.css").read_text(encoding="utf-8")
    js = asset.joinpath("page.js").read_text(encoding="utf-8")
    heading = markup.text(f"{data['title']} · torchlens-explore")
    return (
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
        "<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; script-src 'unsafe-inline'; "
        "style-src 'unsafe-inline'; img-src data:\">"
        f"<title>{heading}</title><style>{css}</style></head><body>"
        f"<script id=\"tlx-data\" type=\"application/octet-stream\">{packed}</script>"
        f"<script>{js}</script></body></html>\n"
    )


def write_html(trace: Trace, path, *, overlay: Mapping[str, float] | None = None, title: str | None = None,
               follow_symlinks: bool = False) -> Path:
    """Write the self-contained explorer page of `trace` to `path` atomically (a failure leaves the old
    file as it was; a symbolic link is refused unless `follow_symlinks`); returns the path."""
    path = Path(path)
    resolve_target(path, follow_symlinks=follow_symlinks)  # refuse a link before building the page
    text = html_document(trace, overlay=overlay, title=title)
    return write_atomic(path, text.encode("utf-8"), error=HtmlWriteError, follow_symlinks=follow_symlinks,
                        what="the HTML file")
