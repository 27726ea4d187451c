"""Paper figures of a trace's layout: SVG written by hand (vector, real <text>) and PNG drawn with Pillow.

Both writers draw one `Scene` (frames, boxes, edges with arrowheads, a caption wrapped to the
figure's width) built from `exporters.layout`, so the two files show the same picture. Sizes follow
paper columns ("column" 3.4 in, "page" 7 in, or inches) and can be capped in height; plumbing ops
(`exporters.layout.hiding.PLUMBING`) are left out unless `hide=()`; `figure_size` gives the
printed size of the labels in points; `fill_width` makes a figure exactly a given width (the drawing
grown up to `MAX_FILL_PT` labels, then centred on white margins).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Iterable, Mapping

from .errors import FigureOptionsError, FigureWriteError
from tracer.atomic_write import resolve_target, write_atomic
from tracer.ir import Trace

from . import markup, overlays
from .layout import Layout, LayoutEngine
from .layout.dag import COMPACT
from .layout.direction import DIRECTIONS, transpose
from .layout.hiding import PLUMBING, hidden_ops
from .layout.style import (BACK_EDGE, EDGE, FONT_FAMILY, FONT_SIZE, FRAME_HEADER, edge_colors, fill_color, fit_text,
                           ladder_caption, op_family, text_width)

COLUMN_IN = 3.4
WIDTHS = {"column": COLUMN_IN, "page": 7.0}  # one paper column, the full text width of two columns
CAPTION_GAP = 10.0
LINE_H = FONT_SIZE * 1.35
ARROW = 5.0
FRAME_FILLS = ("#fbfbfb", "#f3f6fa", "#eef2f7", "#e8eef5")
STROKE = "#555555"
LEGEND_H = 2 * LINE_H + 6.0  # a title line and a row of swatches under the graph
FONT_PT = 8.0  # labels print at this size unless the width or the height cap forces them smaller
MIN_FONT_PT = 5.0  # below this a printed label is hard to read (`FigureSize.legible`)
MAX_FILL_PT = 10.0  # `fill_width` grows labels no larger than this (a paper's body text)


@dataclass(frozen=True, slots=True)
class Scene:
    """One figure in layout units: the layout, each node's fill, and the caption wrapped to fit its width;
    `margin` is white space added either side of the drawing (`fill_width`), included in `width`."""

    layout: Layout
    fills: dict[str, str]
    caption: str | None
    caption_lines: tuple[str, ...] = ()
    legend: dict | None = None  # `exporters.overlays.legend` of the overlay drawn, if any
    direction: str = "TB"  # "LR": left to right, frame headers run up their left side
    margin: float = 0.0

    @property
    def width(self) -> float:
        return self.layout.width + 2 * self.margin

    @property
    def height(self) -> float:
        return self.caption_top + (len(self.caption_lines) * LINE_H + CAPTION_GAP if self.caption_lines else 0.0)

    @property
    def caption_top(self) -> float:
        return self.layout.height + (LEGEND_H if self.legend else 0.0)


@dataclass(frozen=True, slots=True)
class FigureSize:
    """The printed size of a scene: inches, and the labels' size in points."""

    width_in: float
    height_in: float
    font_pt: float

    @property
    def legible(self) -> bool:
        return self.font_pt >= MIN_FONT_PT


def paper_width(width: str | float) -> float:
    """Inches for "column", "page" or a number of inches."""
    if isinstance(width, str) and width in WIDTHS:
        return WIDTHS[width]
    try:
        inches = float(width)
    except (TypeError, ValueError):
        inches = -1.0
    if not 0 < inches <= 100:
        raise FigureOptionsError(f"figure width {width!r} is not 'column', 'page' or inches in (0, 100]",
                                 site="exporters.figures width", width=str(width))
    return inches


def figure_size(scene: Scene, width: str | float = "column", max_height_in: float | None = None,
                font_pt: float | None = FONT_PT) -> FigureSize:
    """Print size: labels at `font_pt` points (None: fill the width) but never wider than `width`,
    shrunk (aspect kept) when taller than `max_height_in`."""
    w = paper_width(width)
    if font_pt is not None:
        if not 2 <= font_pt <= 72:
            raise FigureOptionsError(f"font size {font_pt!r} pt is out of range [2, 72]", site="exporters.figures font_pt",
                                     font_pt=font_pt)
        w = min(w, scene.width * font_pt / FONT_SIZE / 72.0)
    h = w * scene.height / scene.width
    if max_height_in is not None:
        if not 0 < max_height_in <= 100:
            raise FigureOptionsError(f"max height {max_height_in!r} in is out of range (0, 100]",
                                     site="exporters.figures max_height_in", max_height_in=max_height_in)
        if h > max_height_in:
            w, h = w * max_height_in / h, max_height_in
    return FigureSize(w, h, FONT_SIZE * w * 72.0 / scene.width)


def fill_width(scene: Scene, width: str | float, max_height_in: float | None = None,
               max_font_pt: float = MAX_FILL_PT) -> tuple[Scene, FigureSize]:
    """`scene` made exactly `width` wide: the drawing grows until it fills the width, its labels reach
    `max_font_pt` or its height reaches `max_height_in` (whichever comes first); white margins centre
    what remains. A drawing already larger than those bounds is shrunk to them."""
    w = paper_width(width)
    unit = min(w / scene.layout.width, max_font_pt / FONT_SIZE / 72.0)  # inches per layout unit
    if max_height_in is not None:
        unit = min(unit, max_height_in / scene.height)
    margin = max(0.0, (w / unit - scene.layout.width) / 2)
    filled = replace(scene, margin=margin if margin > 1e-6 else 0.0)
    return filled, FigureSize(filled.width * unit, filled.height * unit, FONT_SIZE * unit * 72.0)


def build_scene(
    trace: Trace, *, expanded: Iterable[str] | None = None, fold_repeats: bool = False,
    caption: str | bool | None = None, hide: Iterable[str] = PLUMBING, engine: LayoutEngine | None = None,
    overlay: str | Mapping[str, float] | None = None, overlay_scale: str = "linear", rollup: str = "sum",
    direction: str = "TB",
) -> Scene:
    """The figure of `trace`: `expanded` defaults to `default_expansion`; `hide` names op families
    left out (see `exporters.layout.hiding`; () keeps every op); caption None = the ladder state for
    weights-free traces only, True = always, False = never, a string = that text; `overlay` (a name
    from `exporters.overlays` or `{op label or module path: number}`) fills boxes by value, with a legend."""
    if direction not in DIRECTIONS:
        raise FigureOptionsError(f"direction {direction!r} is not one of {DIRECTIONS}", site="exporters.figures direction",
                                 direction=direction)
    hidden = hidden_ops(trace, hide)
    sideways = direction == "LR"
    if engine is None or engine.trace is not trace or engine.hidden != hidden or engine.transposed != sideways:
        engine = LayoutEngine(trace, hidden, COMPACT, transposed=sideways)
    layout = engine.layout(expanded, fold_repeats=fold_repeats)
    if sideways:
        layout = transpose(layout)
    fills = {}
    for n in layout.nodes:
        family = op_family(trace[n.op_label]) if n.kind == "op" and n.op_label else None
        fills[n.id] = fill_color(n.kind, family)
    key = None
    if overlay is not None:
        fills, key = overlay_fills(trace, layout, overlay, overlay_scale, rollup)
    if caption is None:
        text = ladder_caption(trace.ladder_state) if trace.envelope is not None else None
    elif caption is True:
        text = ladder_caption(trace.ladder_state)
    elif caption is False:
        text = None
    else:
        text = str(caption)
    lines = wrap_text(text, layout.width - 2 * CAPTION_GAP) if text else ()
    return Scene(layout, fills, text, lines, key, direction)


def overlay_fills(trace: Trace, layout: Layout, overlay: str | Mapping[str, float], scale: str = "linear",
                  rollup: str = "sum") -> tuple[dict[str, str], dict]:
    """Each box's fill for `overlay` (modules rolled up by `rollup`) and the legend that explains them."""
    ov = overlays.build_overlay(trace, overlay)
    values = overlays.node_values(layout, ov, rollup)
    cs = overlays.color_scale(values.values(), scale)
    fills = {n.id: cs.color(values.get(n.id)) for n in layout.nodes}
    folded = any(n.kind == "folded" and n.repeat > 1 for n in layout.nodes)
    return fills, overlays.legend(ov, cs, rollup, folded)


def snapshot_overlay_options(trace: Trace, name: str | None, scale: str = "linear", rollup: str = "sum") -> dict:
    """`build_scene` keyword arguments for `snapshot --overlay NAME` (empty when no overlay is asked for)."""
    if not name:
        return {}
    overlays.build_overlay(trace, name)  # refuse an unknown name before any layout work
    return {"overlay": name, "overlay_scale": scale, "rollup": rollup}


def wrap_text(text: str, width: float) -> tuple[str, ...]:
    """`text` broken at spaces into lines at most `width` wide (a word wider than that is cut)."""
    lines: list[str] = []
    line = ""
    for word in text.split():
        trial = f"{line} {word}" if line else word
        if text_width(trial) <= width or not line:
            line = trial
        else:
            lines.append(line)
            line = word
    if line:
        lines.append(line)
    return tuple(fit_text(li, width) for li in lines)


# -- SVG -----------------------------------------------------------------------------
def scene_svg(scene: Scene, width_in: float = COLUMN_IN, height_in: float | None = None) -> str:
    """The scene as an SVG document `width_in` inches wide (viewBox in layout units, text kept as text;
    a margin widens the viewBox either side of the layout's own coordinates)."""
    w, h = scene.width, scene.height
    x0 = f"{-scene.margin:.1f}" if scene.margin else "0"  # where the viewBox starts: left of the layout's x = 0
    height_in = width_in * h / w if height_in is None else height_in
    out = [
        '<?xml version="1.0" encoding="UTF-8"?>',
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width_in:.3f}in" height="{height_in:.3f}in" '
        f'viewBox="{x0} 0 {w:.1f} {h:.1f}" font-family="{FONT_FAMILY}" font-size="{FONT_SIZE:g}">',
        "<defs>",
        f'<marker id="arrow" viewBox="0 0 10 10" refX="10" refY="5" markerWidth="{ARROW}" markerHeight="{ARROW}" '
        f'markerUnits="userSpaceOnUse" orient="auto"><path d="M0,0 L10,5 L0,10 z" fill="{EDGE}"/></marker>',
        f'<marker id="arrow-back" viewBox="0 0 10 10" refX="10" refY="5" markerWidth="{ARROW}" '
        f'markerHeight="{ARROW}" markerUnits="userSpaceOnUse" orient="auto">'
        f'<path d="M0,0 L10,5 L0,10 z" fill="{BACK_EDGE}"/></marker>',
        "</defs>",
        f'<rect x="{x0}" y="0" width="{w:.1f}" height="{h:.1f}" fill="white"/>',
    ]
    lay = scene.layout
    for f in lay.frames:
        if scene.direction == "LR":  # the header runs up the frame's left strip, ending near its top
            hx, hy = f.x0 + FRAME_HEADER - 5, f.y0 + 6
            header = (f'<text x="{hx:.1f}" y="{hy:.1f}" transform="rotate(-90 {hx:.1f} {hy:.1f})" '
                      f'text-anchor="end" font-weight="bold" fill="#334">{markup.text(f.label)}</text>')
        else:
            header = (f'<text x="{f.x0 + 6:.1f}" y="{f.y0 + FRAME_HEADER - 5:.1f}" font-weight="bold" '
                      f'fill="#334">{markup.text(f.label)}</text>')
        out.append(
            f'<g class="frame" data-address="{markup.attr(f.address)}"><rect x="{f.x0:.1f}" y="{f.y0:.1f}" '
            f'width="{f.x1 - f.x0:.1f}" height="{f.y1 - f.y0:.1f}" rx="6" fill="{FRAME_FILLS[f.depth % 4]}" '
            f'stroke="#9aa7b8" stroke-width="0.8"/>{header}</g>'
        )
    for e, color in zip(lay.edges, edge_colors(lay.edges)):
        pts = " ".join(f"{x:.1f},{y:.1f}" for x, y in e.points)
        marker = "arrow-back" if e.back_edge else "arrow"
        dash = ' stroke-dasharray="3,2"' if e.back_edge else ""
        out.append(f'<polyline class="edge" points="{pts}" fill="none" stroke="{markup.attr(color)}" stroke-width="0.8"'
                   f'{dash} marker-end="url(#{marker})"/>')
    for n in lay.nodes:
        x0, y0 = n.x - n.width / 2, n.y - n.height / 2
        rx = 3 if n.kind in ("op", "io") else 5
        extra = ""
        if n.kind == "folded":  # a second outline behind (below-right) reads as a stack of blocks
            extra = (f'<rect x="{x0 + 3:.1f}" y="{y0 + 3:.1f}" width="{n.width:.1f}" height="{n.height:.1f}" '
                     f'rx="{rx}" fill="{markup.attr(scene.fills[n.id])}" stroke="{STROKE}" stroke-width="0.6"/>')
        out.append(
            f'<g class="node" data-id="{markup.attr(n.id)}" data-kind="{markup.attr(n.kind)}">{extra}<rect x="{x0:.1f}" y="{y0:.1f}" '
            f'width="{n.width:.1f}" height="{n.height:.1f}" rx="{rx}" fill="{markup.attr(scene.fills[n.id])}" stroke="{STROKE}" '
            f'stroke-width="0.7"/><text x="{n.x:.1f}" y="{n.y:.1f}" text-anchor="middle" '
            f'dominant-baseline="central"{_ink(scene.fills[n.id])}>{markup.text(n.label)}</text></g>'
        )
    out.extend(_legend_svg(scene))
    for i, line in enumerate(scene.caption_lines):
        out.append(f'<text class="caption" x="{scene.layout.width / 2:.1f}" y="{_caption_baseline(scene, i):.1f}" '
                   f'text-anchor="middle" font-style="italic">{markup.text(line)}</text>')
    out.append("</svg>")
    return "\n".join(out) + "\n"


def _ink(fill: str) -> str:
    """A white-text attribute on a dark overlay fill (nothing on the default light fills)."""
    return ' fill="#ffffff"' if overlays.text_color(fill) == "#ffffff" else ""


def _caption_baseline(scene: Scene, line: int) -> float:
    return scene.caption_top + CAPTION_GAP / 2 + (line + 1) * LINE_H - LINE_H * 0.3


def _legend_items(scene: Scene) -> tuple[str, list[tuple[str, str]]]:
    """The legend's title and its (text, colour) swatches."""
    key = scene.legend or {}
    return key.get("title", ""), [(t, c) for t, c in key.get("stops", key.get("items", []))]


def _legend_room(scene: Scene) -> float:
    """How far right of the layout's x = 0 the legend may run: the drawing and the margin right of it."""
    return scene.layout.width + scene.margin


def _legend_cells(scene: Scene) -> tuple[float, float, float, list[tuple[float, str, str]]]:
    """Where the legend sits: its title baseline, the swatch row's top, swatch size, and each swatch's x."""
    _, items = _legend_items(scene)
    top = scene.layout.height + 2
    size = LINE_H * 0.8
    def place(chosen):
        x, cells = 6.0, []
        for text, color in chosen:
            cells.append((x, text, color))
            x += size + 4 + text_width(text) + 10
        return x, cells

    end, cells = place(items)
    if end > _legend_room(scene) and len(items) > 2:  # a narrow figure keeps the two ends of the scale
        end, cells = place([items[0], items[-1]])
    return top + LINE_H * 0.8, top + LINE_H + 2, size, cells


def _legend_svg(scene: Scene) -> list[str]:
    if not scene.legend:
        return []
    title, _ = _legend_items(scene)
    base, row, size, cells = _legend_cells(scene)
    out = [f'<g class="legend"><text x="6" y="{base:.1f}" font-weight="bold">'
           f'{markup.text(fit_text(title, _legend_room(scene) - 12))}</text>']
    for x, text, color in cells:
        out.append(f'<rect x="{x:.1f}" y="{row:.1f}" width="{size:.1f}" height="{size:.1f}" fill="{markup.attr(color)}" '
                   f'stroke="{STROKE}" stroke-width="0.5"/><text x="{x + size + 4:.1f}" y="{row + size * 0.85:.1f}">'
                   f'{markup.text(text)}</text>')
    out.append("</g>")
    return out


def _legend_png(scene: Scene, d, p, k: float, font, bold) -> None:
    if not scene.legend:
        return
    title, _ = _legend_items(scene)
    base, row, size, cells = _legend_cells(scene)
    d.text(p(6, base), fit_text(title, _legend_room(scene) - 12), fill="black", font=bold, anchor="ls")
    for x, text, color in cells:
        d.rectangle([p(x, row), p(x + size, row + size)], fill=color, outline=STROKE, width=max(1, round(0.5 * k)))
        d.text(p(x + size + 4, row + size * 0.85), text, fill="black", font=font, anchor="ls")


def export_svg(
    trace: Trace, path, *, expanded: Iterable[str] | None = None, fold_repeats: bool = False,
    width_in: str | float = COLUMN_IN, caption: str | bool | None = None, hide: Iterable[str] = PLUMBING,
    max_height_in: float | None = None, font_pt: float | None = FONT_PT, engine: LayoutEngine | None = None,
    direction: str = "TB",
) -> Path:
    """Write the figure of `trace` as an SVG at most `width_in` wide ("column", "page" or inches) with
    labels at `font_pt` (see `figure_size`); returns the path. Other options as in `build_scene`."""
    scene = build_scene(trace, expanded=expanded, fold_repeats=fold_repeats, caption=caption, hide=hide, engine=engine,
                        direction=direction)
    return write_scene(scene, path, figure_size(scene, width_in, max_height_in, font_pt), "svg")


def write_scene(scene: Scene, path, size: FigureSize, fmt: str, dpi: int = 300, *,
                follow_symlinks: bool = False) -> Path:
    """Write `scene` at `size` as `fmt` ("svg" or "png", the PNG at `dpi`) atomically; returns the path.
    A path that is a symbolic link is refused unless `follow_symlinks`."""
    path = Path(path)
    resolve_target(path, follow_symlinks=follow_symlinks)  # refuse a link before any drawing
    if fmt == "png":
        import io

        _check_dpi(dpi)
        buf = io.BytesIO()
        scene_png(scene, size.width_in, dpi).save(buf, format="PNG", dpi=(dpi, dpi), optimize=True)
        return _write(path, buf.getvalue(), follow_symlinks)
    return _write(path, scene_svg(scene, size.width_in, size.height_in).encode("utf-8"), follow_symlinks)


# -- PNG -----------------------------------------------------------------------------
def scene_png(scene: Scene, width_in: float = COLUMN_IN, dpi: int = 300):
    """The scene drawn with Pillow: a PIL image `width_in * dpi` pixels wide (2x supersampled)."""
    from PIL import Image, ImageDraw

    target_w = max(1, round(width_in * dpi))
    target_h = max(1, round(target_w * scene.height / scene.width))
    check_png_pixels(target_w, target_h)
    ss = 2
    k = target_w * ss / scene.width  # pixels per layout unit while drawing
    img = Image.new("RGB", (target_w * ss, target_h * ss), "white")
    d = ImageDraw.Draw(img)
    font = _font(FONT_SIZE * k)
    bold = _font(FONT_SIZE * k, bold=True)
    line = max(1, round(0.8 * k))
    lay = scene.layout

    def p(x: float, y: float) -> tuple[float, float]:
        return ((x + scene.margin) * k, y * k)

    for f in lay.frames:
        d.rounded_rectangle([p(f.x0, f.y0), p(f.x1, f.y1)], radius=6 * k, fill=FRAME_FILLS[f.depth % 4],
                            outline="#9aa7b8", width=line)
        if scene.direction == "LR":
            _text_up(img, p(f.x0 + FRAME_HEADER - 5, f.y0 + 6), f.label, bold, "#334")
        else:
            d.text(p(f.x0 + 6, f.y0 + FRAME_HEADER - 5), f.label, fill="#334", font=bold, anchor="ls")
    for e, color in zip(lay.edges, edge_colors(lay.edges)):
        pts = [p(x, y) for x, y in e.points]
        d.line(pts, fill=color, width=line, joint="curve")
        _arrowhead(d, pts, ARROW * k, color)
    for n in lay.nodes:
        box = [p(n.x - n.width / 2, n.y - n.height / 2), p(n.x + n.width / 2, n.y + n.height / 2)]
        if n.kind == "folded":
            shadow = [(box[0][0] + 3 * k, box[0][1] + 3 * k), (box[1][0] + 3 * k, box[1][1] + 3 * k)]
            d.rounded_rectangle(shadow, radius=5 * k, fill=scene.fills[n.id], outline=STROKE, width=line)
        d.rounded_rectangle(box, radius=(3 if n.kind in ("op", "io") else 5) * k, fill=scene.fills[n.id],
                            outline=STROKE, width=line)
        d.text(p(n.x, n.y), n.label, fill=overlays.text_color(scene.fills[n.id]), font=font, anchor="mm")
    _legend_png(scene, d, p, k, font, bold)
    italic = _font(FONT_SIZE * k, italic=True)
    for i, text in enumerate(scene.caption_lines):
        d.text(p(scene.layout.width / 2, _caption_baseline(scene, i)), text, fill="black", font=italic, anchor="ms")
    return img.resize((target_w, target_h), Image.LANCZOS)


def _text_up(img, end: tuple[float, float], text: str, font, fill: str) -> None:
    """`text` rotated to read bottom to top, its baseline at x = end[0] and its last letter at y = end[1]."""
    from PIL import Image, ImageDraw

    left, top, right, bottom = font.getbbox(text, anchor="ls")
    tile = Image.new("RGBA", (max(1, right - left + 2), max(1, bottom - top + 2)), (0, 0, 0, 0))
    ImageDraw.Draw(tile).text((1 - left, 1 - top), text, fill=fill, font=font, anchor="ls")
    up = tile.rotate(90, expand=True)  # counter-clockwise: the baseline becomes the column x = 1 - top
    img.paste(up, (round(end[0] - (1 - top)), round(end[1])), up)


def export_png(
    trace: Trace, path, *, expanded: Iterable[str] | None = None, fold_repeats: bool = False, dpi: int = 300,
    width_in: str | float = COLUMN_IN, caption: str | bool | None = None, hide: Iterable[str] = PLUMBING,
    max_height_in: float | None = None, font_pt: float | None = FONT_PT, engine: LayoutEngine | None = None,
    direction: str = "TB",
) -> Path:
    """Write the figure of `trace` as a PNG at `dpi` (recorded in the file), sized as `export_svg`."""
    _check_dpi(dpi)
    scene = build_scene(trace, expanded=expanded, fold_repeats=fold_repeats, caption=caption, hide=hide, engine=engine,
                        direction=direction)
    return write_scene(scene, path, figure_size(scene, width_in, max_height_in, font_pt), "png", dpi)


def font_points(scene: Scene, width_in: float = COLUMN_IN) -> float:
    """The printed size of the figure's text in points at `width_in` (papers want 6 pt or more)."""
    return FONT_SIZE * width_in * 72.0 / scene.width


# -- helpers -------------------------------------------------------------------------
_FONT_FILES = {
    (False, False): ("DejaVuSans.ttf", "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf"),
    (True, False): ("DejaVuSans-Bold.ttf", "/usr/share/fonts/truetype/dejavu/DejaVuSans-Bold.ttf"),
    (False, True): ("DejaVuSans-Oblique.ttf", "/usr/share/fonts/truetype/dejavu/DejaVuSans-Oblique.ttf"),
}


def _font(px: float, bold: bool = False, italic: bool = False):
    from PIL import ImageFont

    size = max(1, round(px))
    for name in _FONT_FILES[(bold, italic and not bold)]:
        try:
            return ImageFont.truetype(name, size)
        except OSError:
            continue
    return ImageFont.load_default(size=size)  # Pillow's bundled scalable font


def _arrowhead(d, pts: list[tuple[float, float]], size: float, color: str) -> None:
    (x0, y0), (x1, y1) = pts[-2], pts[-1]
    ang = math.atan2(y1 - y0, x1 - x0)
    left = (x1 - size * math.cos(ang - 0.45), y1 - size * math.sin(ang - 0.45))
    right = (x1 - size * math.cos(ang + 0.45), y1 - size * math.sin(ang + 0.45))
    d.polygon([(x1, y1), left, right], fill=color)


def _check_dpi(dpi: float) -> None:
    if not (isinstance(dpi, (int, float)) and 0 < dpi <= 2400):
        raise FigureOptionsError(f"figure dpi out of range: dpi={dpi!r}", site="exporters.figures", dpi=dpi)


def _write(path: Path, data: bytes, follow_symlinks: bool = False) -> Path:
    """Write the figure atomically (a temporary file beside it, then a rename): a failure leaves the old file."""
    return write_atomic(path, data, error=FigureWriteError, follow_symlinks=follow_symlinks, what="the figure")


MAX_PNG_PIXELS = 64_000_000  # a PNG's width x height; drawn 2x supersampled, so ~770 MB of pixels while drawing


def check_png_pixels(width_px: int, height_px: int, site: str = "exporters.figures") -> None:
    """Refuse (typed, before any pixel is made) a PNG larger than MAX_PNG_PIXELS."""
    if width_px * height_px > MAX_PNG_PIXELS:
        raise FigureOptionsError(
            f"the PNG would be {width_px:,} x {height_px:,} pixels, over the bound of {MAX_PNG_PIXELS:,}",
            site=site, width_px=width_px, height_px=height_px,
            remedy="Lower --dpi, the width or the height cap, or write an SVG (vector, any size).")
