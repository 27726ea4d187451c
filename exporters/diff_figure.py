"""A paper figure of a trace diff: one side's graph filled by divergence, with a legend and a caption
saying what was compared (see `exporters.diff_overlay`)."""
from __future__ import annotations

from dataclasses import replace
from typing import Iterable

from tracer.differ import TraceDiff
from tracer.ir import Trace

from .diff_overlay import TITLE, diff_caption, divergence_scores, drawn_side
from .figures import Scene, build_scene
from .layout import LayoutEngine
from .layout.hiding import PLUMBING


def diff_scene(diff: TraceDiff, a: Trace, b: Trace, *, expanded: Iterable[str] | None = None,
               fold_repeats: bool = True, hide: Iterable[str] = PLUMBING, caption: str | bool | None = None,
               engine: LayoutEngine | None = None) -> Scene:
    """The figure of `diff` drawn on side b when ops were added, else side a; boxes coloured by divergence."""
    side = drawn_side(diff)
    trace = b if side == "b" else a
    text = diff_caption(diff, side) if caption is None or caption is True else caption
    scene = build_scene(trace, expanded=expanded, fold_repeats=fold_repeats, caption=text, hide=hide, engine=engine,
                        overlay=divergence_scores(diff, side), overlay_scale="linear", rollup="max")
    legend = dict(scene.legend or {})
    legend["title"] = f"{TITLE} · modules: worst"
    return replace(scene, legend=legend)
