"""`snapshot`'s widths and label floor (issue 36 item 7, the leftovers): a page-wide figure of a narrow graph
is exactly a page wide and never worse than the column one, no figure is written with labels under the
floor (left to right included), and the small-label hint suggests only changes that differ from what was
asked. Sizes are read from the written files (SVG: width attribute and viewBox; PNG: pixels and dpi)."""
from __future__ import annotations

import re
import xml.etree.ElementTree as ET

import pytest
import torch
from torch import nn

import tracer
from exporters import figure_detail, figures
from exporters.figures import COLUMN_IN, MIN_FONT_PT, build_scene, figure_size
from exporters.layout import LayoutEngine
from exporters.layout.dag import COMPACT
from exporters.layout.hiding import PLUMBING, hidden_ops

SVG = "{http://www.w3.org/2000/svg}"


class Encoder(nn.Module):
    """A small classifier whose natural drawing is far narrower than a column: an opened root, a
    collapsed `encoder` that the page width can open, and a head."""

    def __init__(self) -> None:
        super().__init__()
        self.encoder = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 32), nn.ReLU())
        self.head = nn.Linear(32, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.encoder(x))


@pytest.fixture(scope="module")
def saved(tmp_path_factory) -> dict[str, str]:
    """Saved eager traces of two narrow models (one with a module to open, one flat: nothing to open) and of
    GPT-2's shipped config (weights-free), so each command only reads a trace back."""
    from tracer.bridges.transformers import trace_config

    torch.manual_seed(0)
    folder = tmp_path_factory.mktemp("traces")
    traces = {"encoder": tracer.trace(Encoder().eval(), (torch.randn(2, 16),)),
              "flat": tracer.trace(nn.Sequential(nn.Linear(8, 8), nn.Tanh(), nn.Linear(8, 2)).eval(),
                                   (torch.randn(1, 8),)),
              "gpt2": trace_config("gpt2", input_shape=(1, 8))}
    for name, trace in traces.items():
        trace.save(folder / name)
    return {name: str(folder / name) for name in traces}


def _run(capsys, source: str, out, *args: str) -> tuple[int, str, str]:
    from app import cli

    code = cli.main(["snapshot", source, "--out", str(out), *args])
    printed = capsys.readouterr()
    return code, printed.out, printed.err


def _svg(capsys, source: str, out, *args: str) -> tuple[ET.Element, bytes, str]:
    code, printed, err = _run(capsys, source, out, *args)
    assert code == 0, err
    return ET.parse(out).getroot(), out.read_bytes(), printed


def _inches(root: ET.Element, attribute: str) -> float:
    return float(root.get(attribute).removesuffix("in"))


def _label_pt(root: ET.Element) -> float:
    """Printed label size: the font size in viewBox units times inches per unit, in points."""
    return float(root.get("font-size")) * _inches(root, "width") * 72.0 / float(root.get("viewBox").split()[2])


def _frames(root: ET.Element) -> set[str]:
    return {g.get("data-address") for g in root.iter(f"{SVG}g") if g.get("class") == "frame"}


# -- 1. a page-wide figure of a narrow graph ----------------------------------------------------------
@pytest.mark.parametrize("model", ["flat", "encoder"])
def test_page_figure_of_a_narrow_graph_is_a_page_wide(saved, tmp_path, capsys, model):
    """Before: both models' page figures were byte-identical to their column ones (1.1-1.8 in wide, 8 pt),
    declared narrower than a column. Now the page figure opens what fits (the encoder), grows its labels up
    to MAX_FILL_PT within the height cap and is declared exactly 7 in wide, the drawing centred."""
    column, column_bytes, _ = _svg(capsys, saved[model], tmp_path / "column.svg", "--width", "column")
    page, page_bytes, printed = _svg(capsys, saved[model], tmp_path / "page.svg", "--width", "page")
    assert _inches(column, "width") < COLUMN_IN  # narrow: at 8 pt it does not fill a column (kept as before)
    assert page_bytes != column_bytes
    assert _inches(page, "width") == pytest.approx(7.0, abs=1e-3)  # declared exactly the width asked
    assert _inches(page, "height") <= 9.0 + 1e-3
    assert _label_pt(column) == pytest.approx(8.0, abs=0.01)
    assert _label_pt(column) < _label_pt(page) <= figures.MAX_FILL_PT + 0.01  # never worse, never oversized
    assert "labels grown from 8 pt to fill the width" in printed
    x0, _, vb_w, _ = (float(v) for v in page.get("viewBox").split())
    assert x0 < 0 and vb_w > -2 * x0  # white margins either side of the drawing, which starts at x = 0
    if model == "encoder":
        assert "encoder" in _frames(page) and "encoder" not in _frames(column)  # the room shows more detail
    else:
        assert _frames(page) == _frames(column)  # nothing to open: the same detail, larger
    from PIL import Image

    png = tmp_path / "page.png"
    assert _run(capsys, saved[model], png, "--width", "page", "--dpi", "100")[0] == 0
    with Image.open(png) as img:  # the PNG is the same size: 7 in at its dpi
        assert img.width == 700 and img.info["dpi"][0] == pytest.approx(100, abs=0.01)


def test_fill_width_respects_the_height_cap_and_the_font_cap(saved):
    """`fill_width` grows a drawing until the width, the label cap or the height cap binds; what is left
    is margin, so the declared width is always the one asked."""
    trace = tracer.load(saved["encoder"])
    scene = build_scene(trace, fold_repeats=True)
    filled, size = figures.fill_width(scene, "page", 9.0)
    assert size.width_in == pytest.approx(7.0)
    assert size.font_pt == pytest.approx(figures.MAX_FILL_PT)  # the font cap binds
    assert figure_size(filled, "page", None, None).font_pt == pytest.approx(size.font_pt)  # the margin is in the scene
    low, low_size = figures.fill_width(scene, "page", 1.0)
    assert low_size.height_in == pytest.approx(1.0) and low_size.width_in == pytest.approx(7.0)  # the height binds
    assert low_size.font_pt < figure_size(scene, "column", 9.0).font_pt  # shrunk to the cap, as figure_size does
    wide, wide_size = figures.fill_width(scene, 2.0)
    assert wide.margin == 0 and wide_size.width_in == pytest.approx(2.0)  # the width binds: no margin


# -- 2. the legible floor, left to right included --------------------------------------------------------
@pytest.mark.parametrize("args", [
    ("--direction", "LR"),                                       # before: 2.3 pt at column width
    ("--direction", "LR", "--width", "page", "--expand", "transformer.h.0"),   # before: 2.9 pt at page width
    ("--direction", "LR", "--width", "page"),                    # 5.3 pt, transformer.h closed (held before too)
    ("--max-height", "2", "--expand", "transformer.h.0"),        # before: 1.9 pt, top to bottom
])
def test_no_figure_is_written_with_labels_under_the_floor(saved, tmp_path, capsys, args):
    """Before: `snapshot` wrote these figures with labels at 1.9-2.9 pt and a note on stdout. Now it either
    writes labels at or above 5 pt or refuses (exit 2, figure_options_invalid, nothing written) naming the
    size it would print and options that reach the floor, each of which does."""
    out = tmp_path / "fig.svg"
    code, printed, err = _run(capsys, saved["gpt2"], out, *args)
    if code == 0:
        assert _label_pt(ET.parse(out).getroot()) >= MIN_FONT_PT - 1e-6 and "floor" not in printed
        return
    assert code == 2 and not out.exists()
    assert "refused [figure_options_invalid]" in err and "under the 5 pt floor; nothing was written" in err
    tries = re.search(r"what to do: Try (.*)\.$", err, re.M).group(1).split(" or ")
    assert tries  # at least one way to reach the floor (with "--font-pt P" last, where P >= 2 pt)
    for hint in tries:  # each suggestion, followed, writes a figure at its floor or more
        option = re.sub(r" \(\d+(\.\d+)? pt\)$", "", hint).removesuffix(" to accept labels that small")
        followed = _followed(args, option)
        code, _, err = _run(capsys, saved["gpt2"], out, *followed)
        assert code == 0, (hint, err)
        floor = float(option.split()[1]) if option.startswith("--font-pt") else MIN_FONT_PT
        assert _label_pt(ET.parse(out).getroot()) >= floor - 1e-6, hint


def _followed(args: tuple[str, ...], option: str) -> list[str]:
    """`args` with `option` applied: "--width W --max-height H" replaces those flags, "--direction D"
    the direction, "without --expand" drops the --expand flags, "--font-pt P" adds the size."""
    out = list(args)
    if option == "without --expand":
        while "--expand" in out:
            i = out.index("--expand")
            del out[i:i + 2]
        return out
    words = option.split()
    for flag, value in zip(words[::2], words[1::2]):
        if flag in out:
            out[out.index(flag) + 1] = value
        else:
            out += [flag, value]
    return out


def test_font_pt_under_the_floor_is_what_was_asked(saved, tmp_path, capsys):
    """`--font-pt` under 5 pt accepts labels that small (the refusal's last suggestion): the figure is written
    at that size with no frame closed and no floor complaint (before: written with "under the 5 pt floor:
    try ..." on stdout, after `choose` had tried closing frames towards a floor such a size never reaches)."""
    out = tmp_path / "small.svg"
    for args, pt in ((("--direction", "LR", "--font-pt", "2.3"), 2.3), (("--font-pt", "4"), 4.0)):
        root, _, printed = _svg(capsys, saved["gpt2"], out, *args)
        notes = printed.split(str(out))[1]  # the line after the path (the test's folder name says "floor")
        assert _label_pt(root) == pytest.approx(pt, abs=0.01) and "closed" not in notes and "floor" not in notes


# -- 3. the hint suggests only changes --------------------------------------------------------------------
def _hinted_flags(hints: tuple[str, ...]) -> dict[str, float]:
    """The --width / --max-height values the hints name, in inches ("--width page" is 7)."""
    named = [pair for hint in hints for pair in re.findall(r"(--width|--max-height) (\d+\.\d)", hint)]
    return {flag: float(value) for flag, value in named} | {"--width": 7.0 for hint in hints if "--width page" in hint}


@pytest.mark.parametrize("width", ["column", "page", "7"])
def test_advice_names_only_changes_from_what_was_asked(saved, width):
    """Before: GPT-2 (block 0 open) capped at 2 in tall was advised "--width page --max-height 5.3" at column
    width and "--width 1.9 --max-height 5.3" at page width, though the height alone binds there (a
    narrower width changes nothing). Now a width is suggested only wider than the one asked, and only
    when it is what limits the labels; the same for the height."""
    trace = tracer.load(saved["gpt2"])
    engine = LayoutEngine(trace, hidden_ops(trace, PLUMBING), COMPACT)
    start = engine.default_expansion() | {"transformer.h.0"}
    detail = figure_detail.choose(lambda e: build_scene(trace, expanded=e, fold_repeats=True, engine=engine),
                                  start, width, 2.0, 8.0, adapt=False)
    hints = figure_detail.advice(detail.scene, detail.size, width, 2.0)
    assert hints == ("--max-height 5.3 (5 pt)",)


@pytest.mark.parametrize("width", ["column", "page", "7"])
def test_left_to_right_width_hint_is_wider_than_asked(saved, width):
    """Left to right the width binds: the hint names a wider width (never "--width page" at page width).
    A guard: this already held before (advice checked the asked width for "--width page")."""
    trace = tracer.load(saved["gpt2"])
    engine = LayoutEngine(trace, hidden_ops(trace, PLUMBING), COMPACT, transposed=True)
    start = engine.default_expansion() | {"transformer.h.0"}
    detail = figure_detail.choose(lambda e: build_scene(trace, expanded=e, fold_repeats=True, engine=engine,
                                                        direction="LR"), start, width, 9.0, 8.0, adapt=False)
    hints = figure_detail.advice(detail.scene, detail.size, width, 9.0)
    flags = _hinted_flags(hints)
    asked = {"column": 3.4, "page": 7.0}.get(width) or float(width)
    assert flags.get("--width", 0) > asked and "--max-height" not in flags
    assert ("--width page" in hints[0]) == (width == "column" and flags["--width"] <= 7.0)
