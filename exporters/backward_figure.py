"""Training memory per layer as a stacked bar figure: a Bokeh figure for the app, SVG and PNG for papers.

Each layer (and the rest of the model: embedding, head, loss) gets one bar without activation
checkpointing and, when captured, one with it; a bar stacks parameters, their gradients and the
bytes saved for the backward. One list of drawn parts (`bar_parts`) feeds both file writers.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

from tracer.backward.memory import REST, LayerTable

from . import markup
from .figures import _check_dpi, _font, _write, check_png_pixels, paper_width
from .layout.style import FONT_FAMILY, text_width

SERIES = (("parameters", "#9ecae1"), ("gradients", "#4292c6"), ("saved for backward", "#fd8d3c"))
CHECKPOINTED = "#fdd0a2"  # saved for backward under activation checkpointing
PLAIN, CKPT = "no ckpt", "ckpt"
UNITS = ((1 << 40, "TiB"), (1 << 30, "GiB"), (1 << 20, "MiB"), (1 << 10, "KiB"), (1, "B"))


def unit_for(nbytes: float) -> tuple[int, str]:
    """The binary unit that reads `nbytes` as a number of at least 1 (bytes below 1 KiB)."""
    return next((d, u) for d, u in UNITS if nbytes >= d or d == 1)


def short_layer(name: str) -> str:
    """`model.layers.7` -> `7`; the rest keeps its name."""
    return name if name == REST else name.rpartition(".")[2]


def bar_data(table: LayerTable) -> dict[str, list]:
    """Column data, one row per drawn bar: layer, variant, and the three stacked byte counts."""
    cols: dict[str, list] = {"layer": [], "variant": [], "parameters": [], "gradients": [], "saved for backward": [],
                             "fill_saved": []}
    for r in table.rows:
        variants = [(PLAIN, r.saved_bytes)]
        if r.saved_bytes_checkpointed is not None:
            variants.append((CKPT, r.saved_bytes_checkpointed))
        for variant, saved in variants:
            cols["layer"].append(short_layer(r.layer))
            cols["variant"].append(variant)
            cols["parameters"].append(r.param_bytes)
            cols["gradients"].append(r.grad_bytes)
            cols["saved for backward"].append(saved)
            cols["fill_saved"].append(CHECKPOINTED if variant == CKPT else SERIES[2][1])
    return cols


def title_of(table: LayerTable) -> str:
    kind = "weights-free estimate, shapes \u00d7 dtypes" if table.estimate else "measured"
    return f"Training memory per layer \u00b7 {kind}"


def memory_bokeh(table: LayerTable, *, width: int = 380, height: int = 280):
    """A Bokeh figure of the per-layer bars (values in the unit of the largest bar), with a hover; with
    checkpointing captured, each layer's left bar is without it and its right bar with it."""
    from bokeh.models import ColumnDataSource, FixedTicker, HoverTool, Legend, LegendItem
    from bokeh.plotting import figure

    data = bar_data(table)
    div, unit = unit_for(max((sum(v) for v in zip(data["parameters"], data["gradients"], data["saved for backward"])),
                             default=1))
    names = [s for s, _c in SERIES]
    scaled = {n: [v / div for v in data[n]] for n in names}
    layers = list(dict.fromkeys(data["layer"]))
    pair = CKPT in data["variant"]
    xs = [layers.index(lay) + ((-0.21 if v == PLAIN else 0.21) if pair else 0.0)
          for lay, v in zip(data["layer"], data["variant"])]
    src = ColumnDataSource({"x": xs, **{n.replace(" ", "_"): scaled[n] for n in names},
                            "saved_fill": data["fill_saved"], "layer": data["layer"], "variant": data["variant"]})
    short = "per layer, estimate (weights-free)" if table.estimate else "per layer, measured"
    fig = figure(height=height, width=width, title=f"Training memory {short}", toolbar_location=None, tools="",
                 y_axis_label=unit, x_range=(-0.6, len(layers) - 0.4), name="tlx-memory-figure",
                 x_axis_label="layer" + (" (left bar: without, right: with checkpointing)" if pair else ""))
    bottom = [0.0] * len(xs)
    items = []
    for name, colour in SERIES:
        col = name.replace(" ", "_")
        top = [b + v for b, v in zip(bottom, scaled[name])]
        src.data[f"{col}_bottom"], src.data[f"{col}_top"] = list(bottom), top
        fill = "saved_fill" if name == "saved for backward" else colour
        bars = fig.vbar(x="x", bottom=f"{col}_bottom", top=f"{col}_top", width=0.4 if pair else 0.8, source=src,
                        fill_color=fill, line_color=None)
        items.append(LegendItem(label=f"{name} (pale: ckpt)" if pair and name == SERIES[2][0] else name,
                                renderers=[bars]))
        bottom = top
    fig.add_tools(HoverTool(tooltips=[("layer", "@layer (@variant)"), ("parameters", f"@parameters{{0.00}} {unit}"),
                                      ("gradients", f"@gradients{{0.00}} {unit}"),
                                      ("saved for backward", f"@saved_for_backward{{0.00}} {unit}")]))
    step = max(1, math.ceil(len(layers) / 10))
    ticks = sorted(set(range(0, len(layers) - 1, step)) | {len(layers) - 1})
    fig.xaxis.ticker = FixedTicker(ticks=ticks)
    fig.xaxis.major_label_overrides = {t: layers[t] for t in ticks}
    fig.xaxis.minor_tick_line_color = None
    fig.xaxis.axis_label_text_font_size = "8pt"
    fig.xaxis.axis_label_text_font_style = "normal"
    fig.xgrid.grid_line_color = None
    fig.y_range.start = 0
    fig.add_layout(Legend(items=items, orientation="horizontal", label_text_font_size="8pt", glyph_width=10,
                          glyph_height=10, spacing=6, padding=2, margin=0, border_line_color=None), "above")
    fig.title.text_font_size = "10pt"
    return fig


# -- SVG and PNG: one list of parts ------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class Part:
    """A rectangle (`text` empty) or a text anchored at (x, y) in figure units (1 unit = 1 pt)."""

    x: float
    y: float
    w: float = 0.0
    h: float = 0.0
    fill: str = "#000000"
    text: str = ""
    size: float = 7.0
    anchor: str = "middle"  # start | middle | end
    rotate: bool = False


def bar_parts(table: LayerTable, width_pt: float) -> tuple[float, list[Part]]:
    """The figure's height and its parts at `width_pt` wide: title, axis, bars, layer labels, legend."""
    data = bar_data(table)
    totals = [sum(v) for v in zip(data["parameters"], data["gradients"], data["saved for backward"])]
    div, unit = unit_for(max(totals, default=1))
    step = nice_step(max(totals, default=1) / div / 4)
    ticks = [step * k for k in range(0, 6) if step * k <= max(totals, default=1) / div + step * 0.999][:6]
    top_v = ticks[-1] or 1.0
    left, right, top, plot_h = 34.0, 6.0, 30.0, 150.0
    layers = list(dict.fromkeys(data["layer"]))
    slot = (width_pt - left - right) / max(1, len(layers))
    per = 2 if CKPT in data["variant"] else 1
    bar_w = slot * 0.8 / per
    parts = [Part(left, 12.0, text=title_of(table), size=8.0, anchor="start")]
    for v in ticks:  # y axis: gridlines and tick values
        y = top + plot_h - plot_h * v / top_v
        parts.append(Part(left, y - 0.25, width_pt - left - right, 0.5, "#dddddd"))
        parts.append(Part(left - 3, y + 2.5, text=f"{v:g}", size=6.5, anchor="end"))
    parts.append(Part(8.0, top + plot_h / 2, text=unit, size=7.0, rotate=True))
    seen: dict[str, int] = {}
    for i, layer in enumerate(data["layer"]):
        g = layers.index(layer)
        k = seen[layer] = seen.get(layer, -1) + 1
        x, base = left + g * slot + slot * 0.1 + k * bar_w, top + plot_h
        for (name, colour) in SERIES:
            h = plot_h * data[name][i] / div / top_v
            fill = data["fill_saved"][i] if name == "saved for backward" else colour
            parts.append(Part(x, base - h, bar_w * 0.94, h, fill))
            base -= h
        if k == 0:
            parts.append(Part(left + g * slot + slot / 2, top + plot_h + 9, text=layer, size=6.0))
    ly = top + plot_h + 22
    x = left
    legend = [*SERIES, ("saved, with checkpointing", CHECKPOINTED)] if per == 2 else list(SERIES)
    for name, colour in legend:
        parts.append(Part(x, ly - 6, 7, 7, colour))
        parts.append(Part(x + 10, ly, text=name, size=6.5, anchor="start"))
        x += 22 + text_width(name, 6.5)
    if per == 2:
        parts.append(Part(left, ly + 12, text="each layer: left bar without, right bar with activation checkpointing",
                          size=6.0, anchor="start"))
    return ly + 20, parts


def nice_step(raw: float) -> float:
    """1, 2 or 5 times a power of ten, at least `raw`."""
    if raw <= 0:
        return 1.0
    power = 10 ** math.floor(math.log10(raw))
    return next(m * power for m in (1, 2, 5, 10) if m * power >= raw)


def memory_svg(table: LayerTable, width_in: float = 7.0) -> str:
    """The figure as SVG text (real <text>), `width_in` inches wide."""
    w = width_in * 72
    h, parts = bar_parts(table, w)
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width_in:.3f}in" height="{h / 72:.3f}in" '
           f'viewBox="0 0 {w:.1f} {h:.1f}" font-family="{FONT_FAMILY}">', f'<rect width="{w:.1f}" height="{h:.1f}" fill="white"/>']
    for p in parts:
        if p.text:
            rot = f' transform="rotate(-90 {p.x:.1f} {p.y:.1f})"' if p.rotate else ""
            out.append(f'<text x="{p.x:.1f}" y="{p.y:.1f}" font-size="{p.size}" text-anchor="{p.anchor}"{rot}>'
                       f"{markup.text(p.text)}</text>")
        else:
            out.append(f'<rect x="{p.x:.2f}" y="{p.y:.2f}" width="{p.w:.2f}" height="{p.h:.2f}" fill="{markup.attr(p.fill)}"/>')
    return "\n".join([*out, "</svg>"])


def memory_png(table: LayerTable, width_in: float = 7.0, dpi: int = 300):
    """The figure drawn with Pillow: a PIL image `width_in * dpi` pixels wide."""
    from PIL import Image, ImageDraw

    _check_dpi(dpi)
    w = width_in * 72
    h, parts = bar_parts(table, w)
    k = dpi / 72
    check_png_pixels(max(1, round(w * k)), max(1, round(h * k)), "exporters.backward_figure")
    img = Image.new("RGB", (max(1, round(w * k)), max(1, round(h * k))), "white")
    d = ImageDraw.Draw(img)
    for p in parts:
        if not p.text:
            d.rectangle([p.x * k, p.y * k, (p.x + p.w) * k, (p.y + p.h) * k], fill=p.fill)
    for p in parts:
        if p.text:
            font = _font(p.size * k)
            anchor = {"start": "ls", "middle": "ms", "end": "rs"}[p.anchor]
            if p.rotate:
                box = d.textbbox((0, 0), p.text, font=font)
                label = Image.new("RGBA", (box[2] + 2, box[3] + 2), (255, 255, 255, 0))
                ImageDraw.Draw(label).text((0, 0), p.text, fill="black", font=font)
                label = label.rotate(90, expand=True)
                img.paste(label, (round(p.x * k - label.width / 2), round(p.y * k - label.height / 2)), label)
            else:
                d.text((p.x * k, p.y * k), p.text, fill="black", font=font, anchor=anchor)
    return img


def figure_format(path) -> str:
    """"svg" or "png" from the file name; anything else is refused typed."""
    from .errors import FigureOptionsError

    fmt = Path(path).suffix.lower().lstrip(".")
    if fmt not in ("svg", "png"):
        raise FigureOptionsError(f"{Path(path).name} must end in .svg or .png", site=str(path),
                                 remedy="Name the figure fig.svg (vector, for papers) or fig.png.")
    return fmt


def write_memory_figure(table: LayerTable, path, *, width: str | float = "page", dpi: int = 300,
                        follow_symlinks: bool = False) -> Path:
    """Write the per-layer memory figure as .svg or .png (by the suffix) atomically; returns the path."""
    import io

    from tracer.atomic_write import resolve_target

    path = Path(path)
    width_in = paper_width(width)
    resolve_target(path, follow_symlinks=follow_symlinks)
    if figure_format(path) == "svg":
        return _write(path, memory_svg(table, width_in).encode("utf-8"), follow_symlinks)
    buf = io.BytesIO()
    memory_png(table, width_in, dpi).save(buf, format="PNG", dpi=(dpi, dpi), optimize=True)
    return _write(path, buf.getvalue(), follow_symlinks)
