"""`snapshot`'s print size chooses the detail (issue 36 item 7): a page-wide figure uses its room, a
left-to-right one keeps its labels at the legible floor, and the small-label hint names only what helps.
Label sizes are read from the written SVG (its width in inches over its viewBox width, times the font size)."""
from __future__ import annotations

import re
import xml.etree.ElementTree as ET

import pytest

from exporters import figure_detail
from exporters.figures import MIN_FONT_PT, build_scene, figure_size
from exporters.layout import LayoutEngine
from exporters.layout.dag import COMPACT
from exporters.layout.hiding import PLUMBING, hidden_ops

SVG = "{http://www.w3.org/2000/svg}"


@pytest.fixture(scope="module")
def gpt2(tmp_path_factory):
    """GPT-2 small from its shipped config (weights-free), saved once so each command reads it back fast."""
    from tracer.bridges.transformers import trace_config

    trace = trace_config("gpt2", input_shape=(1, 8))
    folder = tmp_path_factory.mktemp("gpt2") / "trace"
    trace.save(folder)
    return trace, str(folder)


def _snapshot(capsys, tmp_path, source: str, name: str, *args: str) -> tuple[ET.Element, bytes, str]:
    from app import cli

    out = tmp_path / name
    assert cli.main(["snapshot", source, "--out", str(out), *args]) == 0
    return ET.parse(out).getroot(), out.read_bytes(), capsys.readouterr().out


def _refused(capsys, tmp_path, source: str, name: str, *args: str) -> str:
    """`snapshot`'s refusal (exit 2, no file written): its stderr."""
    from app import cli

    out = tmp_path / name
    assert cli.main(["snapshot", source, "--out", str(out), *args]) == 2 and not out.exists()
    return capsys.readouterr().err


def _label_pt(root: ET.Element) -> float:
    width_in = float(root.get("width").removesuffix("in"))
    return float(root.get("font-size")) * width_in * 72.0 / float(root.get("viewBox").split()[2])


def _frames(root: ET.Element) -> set[str]:
    return {g.get("data-address") for g in root.iter(f"{SVG}g") if g.get("class") == "frame"}


def test_page_width_uses_its_room(gpt2, tmp_path, capsys):
    """Before: GPT-2 at page width was byte-identical to column (2.97 x 5.13 in, 8 pt): the figure at 8 pt is
    narrower than a column, so the width never bound. Now the page opens the repeated block."""
    _, folder = gpt2
    column, column_bytes, _ = _snapshot(capsys, tmp_path, folder, "column.svg", "--width", "column")
    page, page_bytes, printed = _snapshot(capsys, tmp_path, folder, "page.svg", "--width", "page")
    assert page_bytes != column_bytes
    assert "transformer.h.0" in _frames(page) and "transformer.h.0" not in _frames(column)
    assert _label_pt(column) == pytest.approx(8.0, abs=0.01)  # the page: opened at 8 pt, then grown to fill it
    assert 8.0 <= _label_pt(page) <= 10.0 + 0.01 and page.get("width") == "7.000in"
    assert float(page.get("height").removesuffix("in")) <= 9.0 + 1e-3  # within the height cap
    assert "opened transformer.h.0" in printed and "--expand to choose" in printed
    explicit, _, printed = _snapshot(capsys, tmp_path, folder, "explicit.svg", "--width", "page", "--expand", "transformer")
    assert "transformer.h.0" not in _frames(explicit) and "opened" not in printed  # --expand: the detail asked for
    short, short_bytes, printed = _snapshot(capsys, tmp_path, folder, "short.svg", "--width", "page", "--max-height", "5.2")
    assert "no module opens within 7 x 5.2 in at 8 pt" in printed  # no room to open a block: the line says so


def test_left_to_right_labels_stay_legible(gpt2, tmp_path, capsys):
    """Before: `--direction LR --width page` printed GPT-2's labels at 4.8 pt (2.9 pt with block 0 open).
    Now the default detail closes frames until they reach the floor, and an explicit one is refused with
    what would reach it (exit 2, nothing written)."""
    _, folder = gpt2
    lr, _, printed = _snapshot(capsys, tmp_path, folder, "lr.svg", "--direction", "LR", "--width", "page")
    assert _label_pt(lr) >= MIN_FONT_PT
    assert "closed transformer.h" in printed and "floor" not in printed.split("closed")[0]
    err = _refused(capsys, tmp_path, folder, "lr_open.svg", "--direction", "LR", "--width", "page",
                   "--expand", "transformer.h.0")
    assert "under the 5 pt floor" in err and "--direction TB (8.7 pt)" in err  # TB at page: opened and filled


def test_small_label_hint_names_only_what_helps(gpt2, tmp_path, capsys):
    """Before: '(small: try --width page, ...)' was printed at page width too. Now each suggestion is one that
    reaches the floor: following the width given gives >= 5 pt labels."""
    _, folder = gpt2
    err = _refused(capsys, tmp_path, folder, "lr_page.svg", "--direction", "LR", "--width", "page",
                   "--expand", "transformer.h.0")
    remedy = err.split("what to do:")[1]
    assert "--width page" not in remedy
    width = re.search(r"--width (\d+\.\d)", remedy)
    assert width and float(width.group(1)) > 7.0
    wide, _, printed = _snapshot(capsys, tmp_path, folder, "lr_wide.svg", "--direction", "LR", "--expand",
                                 "transformer.h.0", "--width", width.group(1), "--max-height", "100")
    assert _label_pt(wide) >= MIN_FONT_PT and "floor" not in printed
    _, _, printed = _snapshot(capsys, tmp_path, folder, "tb.svg")
    assert "floor" not in printed and "try" not in printed  # legible: no hint at all


def test_choose_and_advice_directly(gpt2):
    trace, _ = gpt2
    engine = LayoutEngine(trace, hidden_ops(trace, PLUMBING), COMPACT, transposed=True)

    def build(expanded):
        return build_scene(trace, expanded=expanded, fold_repeats=True, engine=engine, direction="LR")

    start = engine.default_expansion() | {"transformer.h.0"}
    kept = figure_detail.choose(build, start, "page", 9.0, 8.0, adapt=False)
    assert kept.expanded == start and not kept.opened and not kept.closed and not kept.size.legible
    hints = figure_detail.advice(kept.scene, kept.size, "page", 9.0)
    need = float(re.search(r"--width (\d+\.\d)", hints[0]).group(1))
    assert figure_size(kept.scene, need, 9.0).font_pt >= MIN_FONT_PT  # rounded up, so it reaches the floor
    assert figure_size(kept.scene, need - 0.1, 9.0).font_pt < MIN_FONT_PT  # and no wider than needed
    column = figure_detail.choose(build, engine.default_expansion(), "column", 9.0, 8.0)
    assert column.closed == () and not column.size.legible  # closing all but the root does not reach 5 pt at 3.4 in
    page = figure_detail.choose(build, engine.default_expansion(), "page", 9.0, 8.0)
    assert page.size.legible and figure_detail.advice(page.scene, page.size, "page", 9.0) == ()
