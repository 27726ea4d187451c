"""`Trace.draw()`: the default view's figure with the ladder caption, found through the `draw` view."""
from __future__ import annotations

import xml.etree.ElementTree as ET

import pytest
import torch

import tracer
from exporters.errors import FigureOptionsError
from tests.models import tiny_gpt2
from tracer.bridges.transformers import trace_config
from tracer.claims import ladder_headline


@pytest.fixture(scope="module")
def weights_free():
    return trace_config("gpt2")


def _caption(svg: str) -> str:
    root = ET.fromstring(svg.encode("utf-8"))  # a well-formed SVG document
    assert root.tag == "{http://www.w3.org/2000/svg}svg"
    return " ".join(e.text or "" for e in root.iter("{http://www.w3.org/2000/svg}text"))


def test_draw_returns_svg_text_with_the_ladder_caption(weights_free):
    svg = weights_free.draw()
    assert isinstance(svg, str)
    assert ladder_headline("HYPOTHESIS") in _caption(svg)


def test_eager_trace_is_captioned_observed_and_caption_can_be_turned_off():
    tr = tracer.trace(tiny_gpt2(), (torch.randint(0, 50, (1, 4)),))
    assert ladder_headline("OBSERVED") in _caption(tr.draw())
    assert "OBSERVED" not in _caption(tr.draw(caption=False))


def test_draw_writes_svg_and_png_files(weights_free, tmp_path):
    from PIL import Image

    svg_path = weights_free.draw(tmp_path / "fig.svg")
    assert svg_path.is_file() and ladder_headline("HYPOTHESIS") in _caption(svg_path.read_text())
    png_path = weights_free.draw(tmp_path / "fig.png", dpi=100)
    with Image.open(png_path) as img:
        assert img.format == "PNG" and img.width > 100


def test_draw_refuses_an_unknown_suffix_typed(weights_free, tmp_path):
    with pytest.raises(FigureOptionsError) as info:
        weights_free.draw(tmp_path / "fig.pdf")
    assert info.value.code == "figure_options_invalid" and not (tmp_path / "fig.pdf").exists()
