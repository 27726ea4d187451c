"""The first view reads (issue 36): the default 8B page at 1366x768 and 1600x1000, screenshotted in
Chromium and read back with OCR (Debian's tesseract), shows its module and class names inside the
canvas, before and after `Fit`; an opened decoder layer shows its projections' names."""
from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from playwright.sync_api import expect

from tests.app import pagekit
from tests.app.test_browser_overview import SIZES, open_page, settle_view

pytestmark = pytest.mark.browser

PROJECTIONS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


def canvas_words(page, path: Path) -> set[str]:
    """The words OCR reads in the graph's plot area as the page shows it. The screenshot is scaled up
    before reading, as a person leaning closer would (no pixel is added that the page did not draw),
    and read twice: in grey at 3x, and at 4x in black and white (tesseract misses words in coloured
    boxes in grey, and faded words in black and white). The two reads run side by side, each tesseract
    on one thread (`OMP_THREAD_LIMIT=1`: the same words, read in less than half the time on a busy
    two-core host, where its OpenMP threads mostly wait on each other)."""
    from PIL import Image

    if shutil.which("tesseract") is None:
        pytest.fail("Debian's tesseract-ocr is not installed (apt-get install tesseract-ocr)")
    rect = pagekit.plot_rect(page)
    page.screenshot(path=str(path), clip={"x": rect[0], "y": rect[1], "width": rect[2] - rect[0],
                                          "height": rect[3] - rect[1]})
    reads = []
    for scale, threshold in ((3, None), (4, 150)):
        big = path.with_name(f"{path.stem}-x{scale}.png")
        with Image.open(path) as im:
            grey = im.convert("L").resize((im.width * scale, im.height * scale), Image.BICUBIC)
        (grey if threshold is None else grey.point(lambda v: 255 if v > threshold else 0)).save(big)
        reads.append(subprocess.Popen(["tesseract", str(big), "-", "--psm", "3"], stdout=subprocess.PIPE,
                                      stderr=subprocess.PIPE, text=True, env={**os.environ, "OMP_THREAD_LIMIT": "1"}))
    text = ""
    for read in reads:
        out, err = read.communicate(timeout=300)
        if read.returncode:
            raise subprocess.CalledProcessError(read.returncode, read.args, out, err)
        text += out
    return {w for w in re.split(r"[^A-Za-z0-9_]+", text) if w}


def module_names(trace) -> set[str]:
    """Every module's own name and class name in `trace` (five letters or more: no short word that OCR
    could read out of noise)."""
    names = set()
    for address, scope in trace.modules.items():
        names.add(scope.class_name)
        if address:
            names.add(address.rsplit(".", 1)[-1])
    return {n for n in names if len(n) >= 5 and not n.isdigit()}


def label_px(page) -> float:
    """The node labels' font size on screen, in CSS pixels (0 while they are hidden)."""
    return page.evaluate("() => {" + pagekit.FIND_PLOT_VIEW + """
      const r = view.model.renderers.find(r => r.name === 'labels');
      return r.visible ? parseFloat(r.glyph.text_font_size.value || r.glyph.text_font_size) : 0; }""")


@pytest.mark.parametrize("size", SIZES, ids=[f"{w}x{h}" for w, h in SIZES])
def test_the_default_8b_first_view_and_fit_read_by_ocr(default_url, default_loaded, page, artifacts_dir, size):
    open_page(page, default_url, size)
    names = module_names(default_loaded.trace)
    tag = f"{size[0]}x{size[1]}"
    first = canvas_words(page, Path(artifacts_dir) / f"first-view-{tag}.png") & names
    assert label_px(page) >= 9, label_px(page)
    assert len(first) >= 5, sorted(first)
    page.locator(".tlx-fit button").click()
    expect(page.locator(".tlx-last-action")).to_contain_text("Fitted")
    settle_view(page)
    fitted = canvas_words(page, Path(artifacts_dir) / f"first-view-fit-{tag}.png") & names
    assert label_px(page) >= 9, label_px(page)
    assert len(fitted) >= 5, sorted(fitted)


def open_module(page, node_id: str) -> None:
    """Click the box `node_id` (a folded run that holds it unfolds first) and wait for its frame."""
    ids = {n["id"] for n in pagekit.nodes(page)}
    if node_id not in ids:
        parent = node_id.removeprefix("mod:").rsplit(".", 1)[0]
        folded = next(i for i in ids if i.startswith("fold:" + parent))
        pagekit.click_node(page, folded)
        pagekit.wait_node(page, node_id)
        settle_view(page)
    node = next(n for n in pagekit.nodes(page) if n["id"] == node_id)
    x, y = pagekit.to_page(page, node["x"], node["y"])
    rect = pagekit.plot_rect(page)
    if rect[0] < x < rect[2] and rect[1] < y < rect[3]:
        page.mouse.click(x, y)
    else:  # out of view: a person types its name into the search
        search(page, node_id.removeprefix("mod:"))
    pagekit.wait_node(page, node_id, present=False)
    settle_view(page)


def search(page, text: str) -> None:
    box = page.locator(".tlx-search input")
    box.fill(text)
    box.press("Enter")


@pytest.mark.parametrize("size", SIZES, ids=[f"{w}x{h}" for w, h in SIZES])
def test_an_opened_decoder_layer_reads_its_projections(default_url, page, artifacts_dir, size):
    """Open layer 0, then its attention and its MLP, as a person would: each view reads."""
    open_page(page, default_url, size)
    tag, found = f"{size[0]}x{size[1]}", set()
    for step, box in enumerate(("mod:model.layers.0", "mod:model.layers.0.self_attn", "mod:model.layers.0.mlp")):
        open_module(page, box)
        words = canvas_words(page, Path(artifacts_dir) / f"opened-layer-{step}-{tag}.png")
        assert label_px(page) >= 9, (box, label_px(page))
        if step == 0:  # the layer itself: its four parts by name
            assert {"input_layernorm", "self_attn", "post_attention_layernorm", "LlamaMLP"} <= words, sorted(words)
        found |= {p for p in PROJECTIONS if p in words}
    assert len(found) >= 5, sorted(found)


def test_a_selected_op_leaves_the_other_labels_readable(default_url, default_loaded, page, artifacts_dir):
    """Selecting an op fades the boxes around it; OCR still reads the faded boxes' names."""
    op = next(o for o in default_loaded.trace.ops if o.module == "model.layers.0.self_attn.q_proj")
    open_page(page, default_url, (1366, 768))
    open_module(page, "mod:model.layers.0")
    open_module(page, "mod:model.layers.0.self_attn")
    search(page, op.label)
    expect(page.locator(".tlx-inspector")).to_contain_text(f"Op {op.label}")
    page.wait_for_function("() => { const s = Bokeh.documents[Bokeh.documents.length - 1].get_model_by_name('tlx-nodes');"
                           " return s.selected.indices.length > 0; }", timeout=15_000)
    settle_view(page)
    after = canvas_words(page, Path(artifacts_dir) / "selected-after.png")
    # faded (no neighbour of the op), still read; OCR's case is not legibility ("V_proj": v and V differ by size only)
    assert {"k_proj", "v_proj"} <= {w.lower() for w in after}, sorted(after)
