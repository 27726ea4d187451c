"""How much of a trace a printed figure shows, chosen for its size, and advice when its labels are small.

`choose` starts from an expansion and, when asked (`snapshot` without `--expand`), adapts it to the
print size: at a width wider than a column it opens modules (the repeated block first: the one that
adds the most boxes) while the labels keep their size and the figure fits the width and the height
cap; where the labels would print under the legible floor (`figures.MIN_FONT_PT`, a left-to-right
figure of a deep model) it closes frames, keeping the most boxes, until they reach it, or leaves the
detail as it was when no closing does. `advice` names only changes that would raise small labels to
the floor, each with the size it gives.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, Mapping

from .figures import COLUMN_IN, FONT_SIZE, MIN_FONT_PT, FigureSize, Scene, figure_size, paper_width

MAX_STEPS = 12  # modules opened or closed by one choice at most (each step lays out every candidate once)
_EPS = 1e-6


@dataclass(frozen=True, slots=True)
class Detail:
    """The chosen figure: its scene, printed size and expansion, and what `choose` opened or closed."""

    scene: Scene
    size: FigureSize
    expanded: frozenset[str]
    opened: tuple[str, ...] = ()
    closed: tuple[str, ...] = ()


def choose(build: Callable[[frozenset[str]], Scene], start: frozenset[str], width: str | float = "column",
           max_height_in: float | None = None, font_pt: float | None = 8.0, *, adapt: bool = True) -> Detail:
    """The figure `build(expanded)` at the detail that suits its print size (see the module docstring);
    `adapt=False` keeps `start` as it is."""
    def sized(exp: frozenset[str]) -> tuple[Scene, FigureSize]:
        scene = build(exp)
        return scene, figure_size(scene, width, max_height_in, font_pt)

    scene, size = sized(start)
    if not adapt:
        return Detail(scene, size, start)
    if not size.legible:
        closed = _close(sized, start, scene, size)
        if closed is not None:
            return closed
        return Detail(scene, size, start)
    if font_pt is None or paper_width(width) <= COLUMN_IN + _EPS:
        return Detail(scene, size, start)
    return _open(sized, start, scene, size, font_pt)


def _open(sized, exp: frozenset[str], scene: Scene, size: FigureSize, font_pt: float) -> Detail:
    """Open the collapsed module adding the most boxes, while the labels stay at `font_pt`."""
    opened: list[str] = []
    for _ in range(MAX_STEPS):
        if size.font_pt < font_pt - _EPS:
            break
        best = None
        for address in _collapsed(scene, exp):
            s2, z2 = sized(exp | {address})
            gain = len(s2.layout.nodes) - len(scene.layout.nodes)
            if z2.font_pt >= font_pt - _EPS and gain >= 2 and (best is None or gain > best[0]):
                best = (gain, address, s2, z2)
        if best is None:
            break
        _, address, scene, size = best
        exp = exp | {address}
        opened.append(address)
    return Detail(scene, size, exp, opened=tuple(opened))


def _close(sized, exp: frozenset[str], scene: Scene, size: FigureSize) -> Detail | None:
    """Close frames until the labels reach the floor (None when closing every frame but the root does not)."""
    closed: list[str] = []
    for _ in range(MAX_STEPS):
        tried = []
        for address in {f.address for f in scene.layout.frames if f.address and f.address in exp}:
            s2, z2 = sized(exp - {address})
            tried.append((z2.legible, len(s2.layout.nodes) if z2.legible else z2.font_pt, address, s2, z2))
        if not tried:
            return None
        _, _, address, scene, size = max(tried, key=lambda t: (t[0], t[1], t[2]))
        exp = exp - {address}
        closed.append(address)
        if size.legible:
            return Detail(scene, size, exp, closed=tuple(closed))
    return None


def _up(inches: float) -> float:
    return math.ceil(inches * 10 - 1e-9) / 10


def _collapsed(scene: Scene, exp: frozenset[str]) -> list[str]:
    """Modules drawn as one box (a folded run: its first block), in drawing order."""
    out = []
    for n in scene.layout.nodes:
        address = (n.members[0] if n.members else None) if n.kind == "folded" else n.module if n.kind == "module" else None
        if address and address not in exp and address not in out:
            out.append(address)
    return out


def advice(scene: Scene, size: FigureSize, width: str | float, max_height_in: float | None,
           alternatives: Mapping[str, FigureSize] | None = None) -> tuple[str, ...]:
    """Changes that would print `scene`'s labels at the legible floor or more: a wider `--width` or a
    taller `--max-height` (whichever limits the size now) and each of `alternatives` (an option's text
    and the size that option gives) that reaches it; () when the labels are legible already."""
    if size.legible:
        return ()
    out = []
    need_w = _up(scene.width * MIN_FONT_PT / FONT_SIZE / 72.0)  # rounded up, so the advice reaches the floor
    need_h = _up(need_w * scene.height / scene.width)
    grow = []
    if need_w > size.width_in + _EPS:
        page = paper_width("page")
        grow.append("--width page" if need_w <= page and paper_width(width) < page - _EPS else f"--width {need_w:.1f}")
    if max_height_in is not None and need_h > max_height_in + _EPS:
        grow.append(f"--max-height {need_h:.1f}")
    if grow and need_w <= 100 and need_h <= 100:
        out.append(" ".join(grow) + f" ({MIN_FONT_PT:g} pt)")
    for option, alt in (alternatives or {}).items():
        if alt.legible:
            out.append(f"{option} ({alt.font_pt:.1f} pt)")
    return tuple(out)
