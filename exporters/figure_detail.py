"""How much of a trace a printed figure shows, chosen for its size, and advice when its labels are small.

`choose` starts from an expansion and, when asked (`snapshot` without `--expand`), adapts it to the
print size: at a width wider than a column it opens modules (the repeated block first: the one that
adds the most boxes) while the labels keep their size and the figure fits the width and the height
cap; where the labels would print under the floor (`floor_pt`: `figures.MIN_FONT_PT`, or less when
`font_pt` asks for less; a left-to-right figure of a deep model) it closes frames, keeping the most
boxes, until they reach it, or leaves the detail as it was when no closing does. A figure wider than
a column is then made exactly that wide (`figures.fill_width`: labels grown up to `MAX_FILL_PT`,
white margins for the rest). `advice` names only changes that would raise small labels to the floor
and differ from what was asked, each with the size it gives; `illegible` is the refusal that carries it.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, Mapping

from .errors import FigureOptionsError
from .figures import (COLUMN_IN, FONT_SIZE, MAX_FILL_PT, MIN_FONT_PT, FigureSize, Scene, figure_size, fill_width,
                      paper_width)

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


def floor_pt(font_pt: float | None) -> float:
    """The smallest label size a figure may print at: the legible floor, or `font_pt` where it asks for less."""
    return MIN_FONT_PT if font_pt is None else min(MIN_FONT_PT, font_pt)


def reaches(size: FigureSize, floor: float) -> bool:
    """Whether a figure of `size` prints its labels at `floor` or more."""
    return size.font_pt >= floor - _EPS


def choose(build: Callable[[frozenset[str]], Scene], start: frozenset[str], width: str | float = "column",
           max_height_in: float | None = None, font_pt: float | None = 8.0, *, adapt: bool = True) -> Detail:
    """The figure `build(expanded)` at the detail that suits its print size, filled to `width` when that
    is wider than a column (see the module docstring); `adapt=False` keeps `start` as it is."""
    def sized(exp: frozenset[str]) -> tuple[Scene, FigureSize]:
        scene = build(exp)
        return scene, figure_size(scene, width, max_height_in, font_pt)

    scene, size = sized(start)
    detail = Detail(scene, size, start)
    floor = floor_pt(font_pt)
    wide = paper_width(width) > COLUMN_IN + _EPS
    if adapt and not reaches(size, floor):
        detail = _close(sized, start, scene, size, floor) or detail
    elif adapt and wide and font_pt is not None:
        detail = _open(sized, start, scene, size, font_pt)
    return _filled(detail, width, max_height_in, font_pt) if wide else detail


def _filled(detail: Detail, width: str | float, max_height_in: float | None, font_pt: float | None) -> Detail:
    """`detail` drawn exactly `width` wide: labels grown up to `MAX_FILL_PT` (or `font_pt`, if larger)."""
    cap = MAX_FILL_PT if font_pt is None else max(MAX_FILL_PT, font_pt)
    scene, size = fill_width(detail.scene, width, max_height_in, cap)
    return Detail(scene, size, detail.expanded, detail.opened, detail.closed)


def _open(sized, exp: frozenset[str], scene: Scene, size: FigureSize, font_pt: float) -> Detail:
    """Open the collapsed module adding the most boxes, while the labels stay at `font_pt`."""
    opened: list[str] = []
    for _ in range(MAX_STEPS):
        if not reaches(size, font_pt):
            break
        best = None
        for address in _collapsed(scene, exp):
            s2, z2 = sized(exp | {address})
            gain = len(s2.layout.nodes) - len(scene.layout.nodes)
            if reaches(z2, font_pt) and gain >= 2 and (best is None or gain > best[0]):
                best = (gain, address, s2, z2)
        if best is None:
            break
        _, address, scene, size = best
        exp = exp | {address}
        opened.append(address)
    return Detail(scene, size, exp, opened=tuple(opened))


def _close(sized, exp: frozenset[str], scene: Scene, size: FigureSize, floor: float) -> Detail | None:
    """Close frames until the labels reach `floor` (None when closing every frame but the root does not)."""
    closed: list[str] = []
    for _ in range(MAX_STEPS):
        tried = []
        for address in {f.address for f in scene.layout.frames if f.address and f.address in exp}:
            s2, z2 = sized(exp - {address})
            ok = reaches(z2, floor)
            tried.append((ok, len(s2.layout.nodes) if ok else z2.font_pt, address, s2, z2))
        if not tried:
            return None
        ok, _, address, scene, size = max(tried, key=lambda t: (t[0], t[1], t[2]))
        exp = exp - {address}
        closed.append(address)
        if ok:
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
           alternatives: Mapping[str, FigureSize] | None = None, floor: float = MIN_FONT_PT) -> tuple[str, ...]:
    """Changes that would print `scene`'s labels at `floor` or more: a `--width` wider than `width` and a
    `--max-height` taller than `max_height_in`, each only where it is what limits the size, and each of
    `alternatives` (an option's text and the size that option gives) that reaches it; () when the labels
    reach the floor already. Nothing suggested repeats what was asked."""
    if reaches(size, floor):
        return ()
    out = []
    drawing = scene.layout.width  # a filled scene's margins are not drawing
    need_w = _up(drawing * floor / FONT_SIZE / 72.0)  # rounded up, so the advice reaches the floor
    need_h = _up(need_w * scene.height / drawing)
    asked, page = paper_width(width), paper_width("page")
    grow = []
    if need_w > asked + _EPS:  # the width binds: only a wider one helps
        grow.append("--width page" if need_w <= page and asked < page - _EPS else f"--width {need_w:.1f}")
    if max_height_in is not None and need_h > max_height_in + _EPS:
        grow.append(f"--max-height {need_h:.1f}")
    if grow and need_w <= 100 and need_h <= 100:
        out.append(" ".join(grow) + f" ({floor:g} pt)")
    for option, alt in (alternatives or {}).items():
        if reaches(alt, floor):
            out.append(f"{option} ({alt.font_pt:.1f} pt)")
    return tuple(out)


def illegible(size: FigureSize, floor: float, hints: tuple[str, ...], site: str = "snapshot") -> FigureOptionsError:
    """The refusal for a figure whose labels would print under `floor`: what it would print, and `hints`
    (from `advice`) plus the `--font-pt` that accepts labels that small, where there is one."""
    accept = math.floor(size.font_pt * 10 + 1e-9) / 10
    tries = list(hints) + ([f"--font-pt {accept:.1f} to accept labels that small"] if accept >= 2 else [])
    remedy = ("Try " + " or ".join(tries) + "." if tries else
              "Open fewer modules, hide more families (--hide norm) or fold repeats (--fold).")
    return FigureOptionsError(
        f"the labels would print at {size.font_pt:.1f} pt ({size.width_in:.2f} x {size.height_in:.2f} in), under the "
        f"{floor:g} pt floor; nothing was written", site=site, remedy=remedy,
        font_pt=round(size.font_pt, 2), floor_pt=floor, width_in=round(size.width_in, 3),
        height_in=round(size.height_in, 3))
