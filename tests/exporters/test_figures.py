"""exporters.figures: SVG (valid XML, real text, caption, paper-column size) and PNG (real, sized, dpi)."""
from __future__ import annotations

import xml.etree.ElementTree as ET

import pytest
import torch

import tracer
from exporters.figures import build_scene, export_png, export_svg, font_points
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
    assert root.get("width") == "3.400in" and root.get("height").endswith("in")
    texts = _texts(root)
    assert "layers.0-2: LlamaDecoderLayer x3" in texts and "LlamaForCausalLM" in texts
    captions = [t for t in root.iter(f"{SVG}text") if t.get("class") == "caption"]
    assert len(captions) == 1 and captions[0].text.startswith("HYPOTHESIS: shapes unproven, no values exist")
    assert len(list(root.iter(f"{SVG}polyline"))) > 0
    assert all(p.get("marker-end", "").startswith("url(#arrow") for p in root.iter(f"{SVG}polyline"))
    vb = [float(v) for v in root.get("viewBox").split()]
    assert float(root.get("height")[:-2]) == pytest.approx(3.4 * vb[3] / vb[2], abs=1e-3)


def test_eager_svg_has_no_caption_unless_asked(eager, tmp_path):
    plain = ET.parse(export_svg(eager, tmp_path / "a.svg")).getroot()
    assert not [t for t in plain.iter(f"{SVG}text") if t.get("class") == "caption"]
    asked = ET.parse(export_svg(eager, tmp_path / "b.svg", caption=True, width_in=7)).getroot()
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
        assert img.format == "PNG" and img.width == round(3.4 * 300)
        scene = build_scene(weights_free, fold_repeats=True)
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
    with Image.open(export_png(eager, tmp_path / "w.png", expanded=exp, width_in=7, dpi=150)) as img:
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
