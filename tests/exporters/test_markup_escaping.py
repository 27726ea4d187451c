"""Every SVG the project writes, over module names and op labels carrying script payloads, parses as XML with
no `on*` attribute and no `script` element; one opened in Chromium fires no dialog (issue 39, item 3)."""
from __future__ import annotations

import dataclasses
import xml.etree.ElementTree as ET
from xml.sax.saxutils import escape as old_escape

import pytest
import torch
from torch import nn

import tracer
from exporters import markup
from exporters.backward_figure import memory_svg, write_memory_figure
from exporters.diff_figure import diff_scene
from exporters.figures import build_scene, export_png, export_svg, figure_size, write_scene
from exporters.notebook import ExplorerView
from tracer.backward.memory import REST, LayerRow, LayerTable

PAYLOADS = (
    'q" autofocus="" onfocus="alert(62)',
    "q' onload='alert(63)",
    "</text><script>alert(64)</script>",
    "<svg onload=alert(65)>",
    "javascript:alert(66)",
    "&amp;<b>x</b>",
    "ctl\x01\x1f\ud800",  # XML 1.0 forbids these: they must not make the file unparsable
)
SVG = "{http://www.w3.org/2000/svg}"


def payload_model() -> nn.Module:
    """Real linear layers whose module names are the payloads, nested one level."""
    inner = nn.Sequential()
    inner.add_module(PAYLOADS[1], nn.Linear(4, 4))
    root = nn.Sequential()
    root.add_module(PAYLOADS[0], nn.Linear(4, 4))
    root.add_module(PAYLOADS[2], inner)
    for name in PAYLOADS[3:]:
        root.add_module(name, nn.Linear(4, 4))
    return root.eval()


def relabelled(trace: tracer.Trace, tag: str) -> tracer.Trace:
    """The same trace with every op label carrying payload `tag` (parents renamed to match)."""
    rename = {op.label: f"{op.label}{tag}" for op in trace.ops}
    ops = tuple(dataclasses.replace(op, label=rename[op.label], parents=tuple(
        dataclasses.replace(e, source=rename[e.source]) for e in op.parents)) for op in trace.ops)
    return tracer.Trace(ops=ops, modules=dict(trace.modules), params=dict(trace.params), model_class=trace.model_class)


@pytest.fixture(scope="module")
def traces():
    torch.manual_seed(0)
    model = payload_model()
    base = tracer.trace(model, (torch.randn(2, 4),))
    other = tracer.trace(model, (torch.randn(2, 4) * 3,))
    return base, relabelled(base, PAYLOADS[0]), relabelled(other, PAYLOADS[0])


def payload_table() -> LayerTable:
    rows = tuple(LayerRow(f"model.layers.{p}", p, 1 << 20, 1 << 19, 1 << 18, 1 << 18) for p in PAYLOADS)
    rows += (LayerRow(REST, PAYLOADS[2], 1 << 10, 1 << 10, 1 << 10, 1 << 10),)
    return LayerTable(rows, 1 << 23, 1 << 22, 1 << 21, 1 << 21, True, PAYLOADS[0])


def hostile_parts(svg: str) -> list[str]:
    """Every `on*` attribute and `script` element in the parsed SVG (parsing fails the test on bad XML)."""
    root = ET.fromstring(svg)
    found = []
    for el in root.iter():
        if el.tag.rpartition("}")[2].lower() == "script":
            found.append("script element")
        found.extend(f"{el.tag}@{name}" for name in el.attrib if name.rpartition("}")[2].lower().startswith("on"))
    return found


def every_svg(traces, tmp_path) -> dict[str, str]:
    """Each SVG writer's output over the payload traces (figures of every module expanded, the diff figure,
    the memory figure), as written to disk."""
    base, labelled, labelled_other = traces
    out = {}
    for name, trace in (("figure", base), ("figure-labels", labelled)):
        expanded = set(trace.modules)
        for direction in ("TB", "LR"):
            path = export_svg(trace, tmp_path / f"{name}-{direction}.svg", expanded=expanded, hide=(), direction=direction,
                              caption=PAYLOADS[2])
            out[f"{name}-{direction}"] = path.read_text(encoding="utf-8")
        scene = build_scene(trace, overlay="flops", hide=(), caption=PAYLOADS[3])
        folded = write_scene(scene, tmp_path / f"{name}-overlay.svg", figure_size(scene, "column", 9.0, 8.0), "svg")
        out[f"{name}-overlay"] = folded.read_text(encoding="utf-8")
    diff = tracer.diff(labelled, labelled_other)
    scene = diff_scene(diff, labelled, labelled_other, expanded=set(labelled.modules), caption=PAYLOADS[0])
    out["diff"] = write_scene(scene, tmp_path / "diff.svg", figure_size(scene, "page", None, 8.0), "svg").read_text(
        encoding="utf-8")
    out["memory"] = write_memory_figure(payload_table(), tmp_path / "memory.svg").read_text(encoding="utf-8")
    return out


def test_every_svg_parses_with_no_handler_and_no_script(traces, tmp_path):
    svgs = every_svg(traces, tmp_path)
    assert len(svgs) == 8
    for name, svg in svgs.items():
        assert hostile_parts(svg) == [], name
    # the names are still there, as text (escaped, not dropped): the frame of the quoted payload module
    root = ET.fromstring(svgs["figure-TB"])
    addresses = {g.get("data-address") for g in root.iter(f"{SVG}g") if g.get("data-address") is not None}
    assert PAYLOADS[0] in addresses and markup.xml_chars(PAYLOADS[6]) in addresses
    ids = {g.get("data-id") for g in ET.fromstring(svgs["figure-labels-TB"]).iter(f"{SVG}g") if g.get("data-id")}
    assert any(i.endswith(PAYLOADS[0]) for i in ids)


def test_the_check_catches_the_old_escaping():
    """The old rule (saxutils.escape, quotes left as they are) gives a handler this check finds."""
    old = f'<svg xmlns="http://www.w3.org/2000/svg"><g data-address="{old_escape(PAYLOADS[0])}"/></svg>'
    assert hostile_parts(old) == [f"{SVG}g@onfocus"]
    new = f'<svg xmlns="http://www.w3.org/2000/svg"><g data-address="{markup.attr(PAYLOADS[0])}"/></svg>'
    assert hostile_parts(new) == []


def test_png_and_notebook_take_the_payloads(traces, tmp_path):
    """The PNG writer draws the same names (lone surrogates included) and the notebook iframe stays one element."""
    base, labelled, _ = traces
    assert export_png(labelled, tmp_path / "f.png", expanded=set(labelled.modules), hide=(), dpi=72).stat().st_size
    assert write_memory_figure(payload_table(), tmp_path / "m.png", dpi=72).stat().st_size
    view = ExplorerView(f'<p title="{PAYLOADS[0]}">{PAYLOADS[2]}</p>')
    html = view._repr_html_()
    assert html.count("<iframe") == 1 and "<script>" not in html and 'onfocus="' not in html
    assert hostile_parts(memory_svg(payload_table())) == []


@pytest.mark.browser
def test_the_svg_figure_opened_in_chromium_fires_no_dialog(traces, tmp_path, browser):
    """The figure and the memory figure opened from disk run nothing; the same page built with the old
    escaping fires the payload's dialog in this harness (so the check can fail)."""
    svgs = every_svg(traces, tmp_path)
    control = tmp_path / "old.svg"
    control.write_text(f'<svg xmlns="http://www.w3.org/2000/svg"><g data-address="{old_escape(PAYLOADS[0])}" '
                       'tabindex="0"><rect width="50" height="50"/></g></svg>', encoding="utf-8")
    page = browser.new_page()
    dialogs: list[str] = []
    page.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
    with page.expect_event("dialog", timeout=20_000):
        page.goto(control.as_uri())
    assert dialogs == ["62"]
    dialogs.clear()
    for name in ("figure-TB", "figure-labels-LR", "diff", "memory"):
        page.goto((tmp_path / f"{name}.svg").as_uri())
        page.wait_for_load_state("load")
        handlers = page.evaluate("() => [...document.querySelectorAll('*')].flatMap(e => [...e.attributes]"
                                 ".filter(a => a.name.startsWith('on')).map(a => a.name)).length"
                                 " + document.querySelectorAll('script').length")
        page.evaluate("() => new Promise(r => requestAnimationFrame(() => requestAnimationFrame(r)))")
        assert handlers == 0 and dialogs == [], name
    page.close()
