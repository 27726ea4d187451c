"""exporters.figures: SVG (valid XML, real text, caption, paper-column size) and PNG (real, sized, dpi)."""
from __future__ import annotations

import xml.etree.ElementTree as ET

import pytest
import torch

import tracer
from exporters.figures import (FigureSize, build_scene, export_png, export_svg, figure_size, font_points,
                               paper_width, wrap_text)
from exporters.layout.hiding import PLUMBING, hidden_ops
from exporters.layout.style import text_width
from exporters.layout import default_expansion
from tests.models import tiny_gpt2
from exporters.errors import FigureOptionsError, FigureWriteError

SVG = "{http://www.w3.org/2000/svg}"


@pytest.fixture(scope="module")
def eager():
    return tracer.trace(tiny_gpt2(4), (torch.tensor([[1, 2, 3, 4]]),))


@pytest.fixture(scope="module")
def weights_free():
    from transformers import LlamaConfig, LlamaForCausalLM

    cfg = LlamaConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=3, num_attention_heads=4,
                      num_key_value_heads=2, vocab_size=100, max_position_embeddings=64)
    with torch.device("meta"):
        model = LlamaForCausalLM(cfg).eval()
    ids = torch.ones(1, 6, dtype=torch.long, device="meta")
    return tracer.trace(model, (ids,), capture=tracer.CaptureOptions(structure_only=True))


def _texts(root) -> list[str]:
    return [t.text for t in root.iter(f"{SVG}text")]


def test_weights_free_svg_is_valid_xml_with_text_and_ladder_caption(weights_free, tmp_path, artifacts_dir):
    assert weights_free.ladder_state == "HYPOTHESIS"
    path = export_svg(weights_free, artifacts_dir / "figure_llama_weights_free.svg", fold_repeats=True)
    root = ET.parse(path).getroot()
    assert root.tag == f"{SVG}svg"
    scene = build_scene(weights_free, fold_repeats=True)
    size = figure_size(scene)  # labels at 8 pt unless the column is too narrow for that
    assert root.get("width") == f"{size.width_in:.3f}in" and size.width_in <= 3.4 and size.font_pt <= 8.0 + 1e-9
    texts = _texts(root)
    assert "layers.0-2: LlamaDecoderLayer x3" in texts and "LlamaForCausalLM" in texts
    captions = [t for t in root.iter(f"{SVG}text") if t.get("class") == "caption"]
    assert len(captions) == 1 and captions[0].text.startswith("HYPOTHESIS: shapes unproven, no values exist")
    assert len(list(root.iter(f"{SVG}polyline"))) > 0
    assert all(p.get("marker-end", "").startswith("url(#arrow") for p in root.iter(f"{SVG}polyline"))
    vb = [float(v) for v in root.get("viewBox").split()]
    assert float(root.get("height")[:-2]) == pytest.approx(size.width_in * vb[3] / vb[2], abs=1e-3)


def test_eager_svg_has_no_caption_unless_asked(eager, tmp_path):
    plain = ET.parse(export_svg(eager, tmp_path / "a.svg")).getroot()
    assert not [t for t in plain.iter(f"{SVG}text") if t.get("class") == "caption"]
    asked = ET.parse(export_svg(eager, tmp_path / "b.svg", caption=True, width_in=7, font_pt=None)).getroot()
    caption = [t.text for t in asked.iter(f"{SVG}text") if t.get("class") == "caption"]
    assert caption and caption[0].startswith("OBSERVED:") and asked.get("width") == "7.000in"
    custom = ET.parse(export_svg(eager, tmp_path / "c.svg", caption="Figure 2: GPT-2 <tiny> & co")).getroot()
    assert "Figure 2: GPT-2 <tiny> & co" in _texts(custom)  # escaped in the file, intact once parsed


def test_png_is_a_real_png_of_paper_column_size(weights_free, artifacts_dir):
    from PIL import Image

    path = export_png(weights_free, artifacts_dir / "figure_llama_weights_free.png", fold_repeats=True, dpi=300)
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    with Image.open(path) as img:
        img.load()
        scene = build_scene(weights_free, fold_repeats=True)
        assert img.format == "PNG" and img.width == round(figure_size(scene).width_in * 300)
        assert img.height == round(img.width * scene.height / scene.width)
        assert img.info["dpi"] == pytest.approx((300, 300), abs=0.01)
        colors = img.convert("RGB").getcolors(maxcolors=1 << 20)
        assert colors is not None and len(colors) > 50  # drawn, antialiased: not a blank page
        # text is dark ink: a good share of near-black pixels exists somewhere in the image
        dark = sum(n for n, (r, g, b) in colors if r + g + b < 150)
        assert dark > 500


def test_full_width_png_and_dpi(eager, tmp_path):
    from PIL import Image

    exp = default_expansion(eager) | {"transformer.h.0"}
    with Image.open(export_png(eager, tmp_path / "w.png", expanded=exp, width_in=7, dpi=150, font_pt=None)) as img:
        assert img.width == 1050


def test_font_size_is_reported_in_points(eager):
    scene = build_scene(eager, fold_repeats=True)
    assert font_points(scene, 7.0) == pytest.approx(2 * font_points(scene, 3.5))
    assert font_points(scene, 3.4) > 4.0  # a folded GPT-2 stays legible in one column


def test_bad_size_and_unwritable_path_are_refused(eager, tmp_path):
    with pytest.raises(FigureOptionsError) as info:
        export_png(eager, tmp_path / "x.png", dpi=0)
    assert info.value.code == "figure_options_invalid" and info.value.remedy
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    with pytest.raises(FigureWriteError) as info:
        export_svg(eager, blocker / "x.svg")
    assert info.value.code == "figure_write_failed" and info.value.site


# -- camera-ready: caption inside the page, widths, height cap, hiding ---------------------------------
def _caption_lines(root):
    return [t for t in root.iter(f"{SVG}text") if t.get("class") == "caption"]


def test_caption_always_fits_inside_the_figure(weights_free, tmp_path):
    long = "Figure 3: " + "a caption far longer than the figure is wide, " * 3
    root = ET.parse(export_svg(weights_free, tmp_path / "c.svg", caption=long)).getroot()
    vb = [float(v) for v in root.get("viewBox").split()]
    lines = _caption_lines(root)
    assert len(lines) >= 2 and " ".join(t.text for t in lines) == " ".join(long.split())
    for t in lines:  # centred, so it fits when half its width fits either side of the centre
        half = text_width(t.text) / 2
        assert float(t.get("x")) - half >= 0 and float(t.get("x")) + half <= vb[2]
        assert float(t.get("y")) <= vb[3]
    layout_bottom = max(float(r.get("y")) + float(r.get("height")) for r in root.iter(f"{SVG}rect")
                        if r.get("class") is None and r.get("width") != f"{vb[2]:.1f}")
    assert min(float(t.get("y")) for t in lines) > layout_bottom  # below the drawing, not over it
    assert wrap_text("one two", text_width("one") + 1) == ("one", "two")
    assert wrap_text("abcdefgh", text_width("abc…") + 0.1) == ("abc…",)  # a word wider than a line is cut


def test_widths_font_and_height_cap(weights_free):
    scene = build_scene(weights_free, fold_repeats=True)
    assert paper_width("column") == 3.4 and paper_width("page") == 7.0 and paper_width("2.5") == 2.5
    full = figure_size(scene, "page", font_pt=None)
    assert full.width_in == 7.0 and full.font_pt == pytest.approx(font_points(scene, 7.0))
    at8 = figure_size(scene, "page")
    assert at8.font_pt == pytest.approx(8.0) or at8.width_in == 7.0
    capped = figure_size(scene, "page", max_height_in=2.0, font_pt=None)
    assert capped.height_in == pytest.approx(2.0) and capped.width_in < 7.0
    assert capped.width_in / capped.height_in == pytest.approx(scene.width / scene.height)
    for bad in (dict(width="wide"), dict(width=0), dict(max_height_in=-1), dict(font_pt=0.5)):
        with pytest.raises(FigureOptionsError) as info:
            figure_size(scene, **bad)
        assert info.value.code == "figure_options_invalid"
    assert FigureSize(3.4, 9, 6.0).legible and not FigureSize(3.4, 9, 3.0).legible


def test_hiding_plumbing_keeps_the_graph_connected(weights_free):
    hidden = hidden_ops(weights_free, PLUMBING)
    kinds = {weights_free[label].kind for label in hidden}
    assert {"arange", "unsqueeze", "to", "getitem", "output"} <= kinds  # output: the KV cache tensors
    assert not any(weights_free[label].kind in ("linear", "embedding", "input") for label in hidden)
    shown = build_scene(weights_free, fold_repeats=True, hide=())
    compact = build_scene(weights_free, fold_repeats=True)
    assert compact.height < shown.height
    lay = compact.layout
    assert not set(lay.visible) & hidden
    assert not [n for n in lay.nodes if "cache" in n.label]
    # an edge through hidden ops joins the nearest shown ops on either side
    def shown_sources(label):
        if label not in hidden:
            return {label}
        return set().union(*(shown_sources(p.source) for p in weights_free[label].parents))

    drawn = {(e.source, e.target) for e in lay.edges}
    bridged = 0
    for op in weights_free.ops:
        if op.label in hidden:
            continue
        for p in op.parents:
            if p.source in hidden:
                for a in shown_sources(p.source):
                    s, t = lay.visible[a], lay.visible[op.label]
                    if s != t:
                        assert (s, t) in drawn, f"{a} -> (hidden {p.source}) -> {op.label} is not drawn"
                        bridged += 1
    assert bridged > 0
    with pytest.raises(FigureOptionsError):
        hidden_ops(weights_free, ["plumbing"])


def test_snapshot_options_size_and_caption(tmp_path, capsys):
    from app import cli

    out = tmp_path / "gpt2.svg"
    assert cli.main(["snapshot", "gpt2", "--out", str(out), "--expand", "transformer.h.0", "--width", "column",
                     "--max-height", "9"]) == 0
    root = ET.parse(out).getroot()
    width, height = float(root.get("width")[:-2]), float(root.get("height")[:-2])
    assert width <= 3.4 + 1e-3 and height <= 9.0 + 1e-3  # GPT-2 with one block open fits a column
    texts = " ".join(t.text or "" for t in root.iter(f"{SVG}text"))
    assert "x11" in texts and "HYPOTHESIS" in texts and "unsqueeze" not in texts
    printed = capsys.readouterr().out
    assert "labels" in printed and "pt" in printed
    out2 = tmp_path / "plain.svg"
    assert cli.main(["snapshot", "gpt2", "--out", str(out2), "--no-caption", "--hide", "none", "--no-fold",
                     "--width", "page", "--font-pt", "20", "--max-height", "100"]) == 0
    plain = ET.parse(out2).getroot()
    assert not _caption_lines(plain) and float(plain.get("width")[:-2]) == pytest.approx(7.0)
    assert cli.main(["snapshot", "gpt2", "--out", str(tmp_path / "x.svg"), "--width", "wide"]) == 2


def test_left_to_right_figures(tmp_path):
    """`direction="LR"` (and `snapshot --direction LR`): the same geometry mirrored across the diagonal, so
    the laid-out picture has no crossings or overflows, edges run left to right, labels fit their real
    width, and frame headers are rotated text."""
    from app import cli
    from exporters.layout import LayoutEngine
    from exporters.layout.checks import edge_crossings
    from exporters.layout.dag import COMPACT
    from exporters.layout.direction import transpose
    from exporters.layout.style import header_width
    from tracer.bridges.transformers import trace_config

    trace = trace_config("gpt2", input_shape=(1, 8))
    hidden = hidden_ops(trace, PLUMBING)
    engine = LayoutEngine(trace, hidden, COMPACT, transposed=True)
    expanded = engine.default_expansion() | {"transformer.h.0"}
    sideways = engine.layout(expanded, fold_repeats=True)  # before the turn: headers on top, checkable as usual
    assert edge_crossings(sideways) == []
    tb = build_scene(trace, expanded=expanded, fold_repeats=True)
    lr = build_scene(trace, expanded=expanded, fold_repeats=True, engine=engine, direction="LR")
    assert lr.layout == transpose(sideways) and lr.direction == "LR"
    assert lr.width > lr.layout.height and tb.layout.height > tb.width  # wide instead of tall
    assert [n for n in lr.layout.nodes if text_width(n.label) > n.width - 2.0] == []  # labels fit across
    assert [f.address for f in lr.layout.frames if header_width(f.label) > f.y1 - f.y0] == []  # headers fit down
    for e in lr.layout.edges:
        if not e.back_edge:
            xs = [x for x, _ in e.points]
            assert xs == sorted(xs) and xs[-1] > xs[0], (e.source, e.target)
            s, t = lr.layout.node(e.source), lr.layout.node(e.target)
            assert abs(e.points[0][0] - (s.x + s.width / 2)) < 1e-6 and abs(e.points[-1][0] - (t.x - t.width / 2)) < 1e-6
    out = tmp_path / "lr.svg"
    wide = ["--expand", "transformer.h.0", "--direction", "LR", "--width", "13"]  # 5 pt or more (a column refuses)
    assert cli.main(["snapshot", "gpt2", "--out", str(out), *wide]) == 0
    root = ET.parse(out).getroot()
    headers = [t for g in root.iter(f"{SVG}g") if g.get("class") == "frame" for t in g.iter(f"{SVG}text")]
    assert headers and all(t.get("transform", "").startswith("rotate(-90") for t in headers)
    assert {t.text for t in root.iter(f"{SVG}text")} >= {n.label for n in lr.layout.nodes}
    png = tmp_path / "lr.png"
    assert cli.main(["snapshot", "gpt2", "--out", str(png), *wide, "--dpi", "100"]) == 0
    from PIL import Image

    with Image.open(png) as img:
        assert img.width > img.height
    with pytest.raises(FigureOptionsError):
        build_scene(trace, direction="RL")
