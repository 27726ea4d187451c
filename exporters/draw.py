"""`Trace.draw`'s figure (the `draw` view): the default view with the ladder caption, as SVG text or a file.

Registered under the entry-point group `torchlens_explore.views` so tracer can offer `trace.draw()`
without importing exporters; the drawing itself is `exporters.figures`'.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Iterable

from tracer.ir import Trace

from . import figures
from .errors import FigureOptionsError
from .layout.hiding import PLUMBING

FORMATS = ("svg", "png")


def draw(trace: Trace, path: Any = None, *, caption: str | bool | None = True, width_in: str | float = "column",
         max_height_in: float | None = None, font_pt: float | None = figures.FONT_PT, dpi: int = 300,
         hide: Iterable[str] = PLUMBING, **scene_options: Any) -> str | Path:
    """The SVG text of `trace`'s figure, or the figure written to `path` (.svg or .png) and its path.

    The caption is the ladder state's headline unless `caption` says otherwise (False: none, a
    string: that text); other options as `figures.build_scene` (expanded, fold_repeats, overlay, direction).
    """
    fmt = "svg" if path is None else Path(path).suffix.lower().lstrip(".")
    if fmt not in FORMATS:
        raise FigureOptionsError(f"cannot draw to {str(path)!r}: the figure is written as .svg or .png",
                                 site="Trace.draw(path)", remedy="Name the file fig.svg or fig.png, or pass no path "
                                                                 "for the SVG text.", path=str(path))
    scene = figures.build_scene(trace, caption=caption, hide=hide, **scene_options)
    size = figures.figure_size(scene, width_in, max_height_in, font_pt)
    if path is None:
        return figures.scene_svg(scene, size.width_in, size.height_in)
    return figures.write_scene(scene, path, size, fmt, dpi)
