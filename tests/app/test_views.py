"""The panels without a browser: inspector content, banner styles, doctor placeholder, graph clicks."""
from __future__ import annotations

from app.state import ExplorerState
from app.views.banner import ClaimBanner, banner_html
from app.views.doctor import NO_MODEL, DoctorPanel
from app.views.graph import GraphView, hit_test
from app.views.inspector import Inspector


def test_inspector_shows_statistics_of_a_saved_value(tiny_loaded):
    s = ExplorerState(tiny_loaded)
    op = next(o for o in s.trace.ops if o.kind == "linear" and o.label in s.trace.values)
    view = Inspector(state=s)
    s.select_op(op.label)
    text = view._pane.object
    value = s.trace.values[op.label].double()
    assert f"{value.mean().item():.6g}" in text and "value std" in text
    assert str(tuple(op.out.shape)) in text and "OBSERVED" in text


def test_refuted_banner_is_drawn_strongest():
    calm = banner_html("HYPOTHESIS", "h", "d", "t")
    loud = banner_html("REFUTED", "h", "d", "t")
    assert 'data-state="REFUTED"' in loud and "4px solid" in loud and "4px solid" not in calm


def test_banner_follows_the_state_after_a_discharge():
    import torch

    import tracer
    from app.sources import Loaded
    from tests.models import tiny_gpt2
    from tests.tracer.test_claims import IDS, SO, meta_twin

    real = tiny_gpt2()  # a bfloat16 weights-free twin, discharged against the float32 model: REFUTED
    wrong = tracer.trace(meta_twin(real).to(torch.bfloat16), (IDS.to("meta"),), capture=SO)
    s = ExplorerState(Loaded(trace=wrong, title="tiny gpt2", origin="factory", source="tests.models:tiny_gpt2"))
    banner = ClaimBanner(state=s)
    assert 'data-state="HYPOTHESIS"' in banner._pane.object
    result = wrong.discharge_against(tracer.trace(real, (IDS,)))  # evolve cannot set a state: a real discharge
    s.set_report(result)
    position = result.contradiction["position"]
    assert 'data-state="REFUTED"' in banner._pane.object and f"ops[{position}] row differs" in banner._pane.object


def test_the_banner_shrinks_to_one_line_once_read_and_opens_again_on_news():
    import torch

    import tracer
    from app.sources import Loaded
    from tests.models import tiny_gpt2
    from tests.tracer.test_claims import IDS, SO, meta_twin

    real = tiny_gpt2()
    wrong = tracer.trace(meta_twin(real).to(torch.bfloat16), (IDS.to("meta"),), capture=SO)
    s = ExplorerState(Loaded(trace=wrong, title="tiny gpt2", origin="factory", source="tests.models:tiny_gpt2"))
    banner = ClaimBanner(state=s)
    assert 'data-compact="0"' in banner._pane.object and "tlx-banner-title" in banner._pane.object
    s.select_op(wrong.ops[3].label)  # the user has moved on: one line, the state still on it
    assert 'data-compact="1"' in banner._pane.object and 'data-state="HYPOTHESIS"' in banner._pane.object
    assert "tlx-banner-title" not in banner._pane.object and 'data-tlx-act="banner:open"' in banner._pane.object
    banner.open()
    assert 'data-compact="0"' in banner._pane.object
    s.select_op(wrong.ops[4].label)
    s.set_report(wrong.discharge_against(tracer.trace(real, (IDS,))))  # news: drawn in full again
    assert 'data-compact="0"' in banner._pane.object and 'data-state="REFUTED"' in banner._pane.object


def test_the_graph_leaves_the_claim_to_the_banner_and_the_exports_caption_it(default_loaded):
    """Issue 36 item 4: the claim is said once on screen (the banner), not again as a caption under the graph;
    the graph offers no toolbar save (a saved canvas would lose the claim): the Export tab's figures caption it."""
    from bokeh.models import SaveTool

    from app.ladder import caption
    from app.views.export import ExportPanel

    s = ExplorerState(default_loaded)
    graph = GraphView(state=s)
    texts = [getattr(a, "text", "") for a in graph.figure.below]
    assert caption(s.trace) not in texts and not any(isinstance(t, SaveTool) for t in graph.figure.toolbar.tools)
    assert caption(s.trace) in ClaimBanner(state=s)._pane.object
    assert caption(s.trace) in ExportPanel(state=s).caption.object


def test_the_inspector_lists_what_a_reader_looks_for_first(default_loaded):
    from app.views.inspector import op_rows

    trace = default_loaded.trace
    op = next(o for o in trace.ops if o.module == "model.layers.0.self_attn.q_proj")
    s = ExplorerState(default_loaded)
    s.select_op(op.label)
    fields = [k for k, _ in op_rows(trace, op.label, s.ladder.state)]
    first = ["kind", "function", "shape", "dtype", "device", "consumed parameters", "source", "parents", "children"]
    assert fields[:len(first)] == first
    text = Inspector(state=s)._pane.object
    assert "<div>model.layers.0.self_attn.q_proj.weight <span style=\"white-space:nowrap\">(4096, 4096) bfloat16</span></div>" \
        in text.replace("<wbr>", "")  # one parameter a line, its shape and dtype together


def test_doctor_says_why_it_cannot_run_on_a_loaded_file(tmp_path, tiny_loaded):
    from app.sources import open_path

    tiny_loaded.trace.save(str(tmp_path / "t"))
    panel = DoctorPanel(state=ExplorerState(open_path(tmp_path / "t")))
    assert NO_MODEL in panel._note.object and panel._run.disabled


def test_a_click_on_a_box_expands_it_and_on_its_frame_collapses_it(tiny_loaded):
    s = ExplorerState(tiny_loaded)
    graph = GraphView(state=s)
    box = s.layout.node("mod:model.layers.1")
    assert graph.click(box.x, box.y) == "expanded model.layers.1"
    assert "model.layers.1" in s.expanded
    frame = next(f for f in s.layout.frames if f.address == "model.layers.1")
    assert hit_test(graph.figure, frame.x1 - 2, frame.y0 + 2)[0] == "frame"
    assert graph.click(frame.x1 - 2, frame.y0 + 2) == "collapsed model.layers.1"
    assert "model.layers.1" not in s.expanded
    op = next(n for n in s.layout.nodes if n.kind == "op")
    assert graph.click(op.x, op.y) == f"selected {op.id}" and s.selected == op.id


def test_the_status_line_says_what_a_click_did_never_where(tiny_loaded):
    """Issue 36 item 7: the status line printed layout coordinates ("click at (235, 377)"), which mean nothing
    to a reader; it says what the click did."""
    import re

    s = ExplorerState(tiny_loaded)
    graph = GraphView(state=s)
    box = s.layout.node("mod:model.layers.1")
    graph._clicked(box.x, box.y)
    graph._write_status()
    assert "expanded model.layers.1" in s.message and "expanded model.layers.1" in graph.summary.object
    assert not re.search(r"\(\s*-?\d+(\.\d+)?\s*,\s*-?\d+", s.message + graph.summary.object), s.message


def test_module_tree_folds_repeated_blocks(default_loaded):
    from app.views.tree import module_table

    df = module_table(ExplorerState(default_loaded))
    run = df[df["module"].str.contains("LlamaDecoderLayer")]
    assert len(run) == 1 and run.iloc[0]["module"].strip() == "0-31: LlamaDecoderLayer x32"
    assert run.iloc[0]["params"] == "218,112,000 \u00d732" and run.iloc[0]["address"] == "model.layers.0"
    assert "model.layers.0.self_attn.q_proj" in set(df["address"])
    assert "model.layers.1" not in set(df["address"])
    assert df.iloc[0]["params"] == "8,030,261,248" and len(df) == 20


def test_the_banner_shows_the_traces_warnings_escaped_and_counted():
    notes = ("[fast_path_not_taken] <b>layers.0</b> ran op by op", "second", "third", "fourth")
    markup = banner_html("OBSERVED", "h", "d", "t", notes)
    assert "&lt;b&gt;layers.0&lt;/b&gt;" in markup and "<b>" not in markup
    assert markup.count('class="tlx-banner-warning"') == 4 and "and 1 more warnings" in markup


def test_the_discharge_tab_of_an_observed_trace_is_a_short_note(tiny_loaded):
    from app.views.discharge import DischargePanel

    panel = DischargePanel(state=ExplorerState(tiny_loaded))
    shown = panel.__panel__()
    assert len(shown.objects) == 1 and "already OBSERVED" in shown.objects[0].object


def test_the_discharge_tab_offers_only_comparable_shipped_configs(gpt2_loaded, default_loaded):
    from app.sources import shipped_configs
    from app.views.discharge import DischargePanel, comparable_configs

    names = list(shipped_configs())
    assert len(names) > 2 and comparable_configs(gpt2_loaded.trace, names) == ["gpt2"]
    assert comparable_configs(default_loaded.trace, names) == ["llama-3.1-8b"]  # not the 405B: another config
    panel = DischargePanel(state=ExplorerState(gpt2_loaded))
    assert panel.config.options == ["gpt2"] and panel.config.value == "gpt2"


def test_open_frames_carry_a_chevron_at_their_header_and_a_click_there_closes_them(default_loaded):
    from exporters.bokeh_graph import CHEVRON, figure_data

    s = ExplorerState(default_loaded)
    s.toggle("model.layers.1")
    frames = figure_data(s.layout, s.trace)["frames"]
    row = frames["address"].index("model.layers.1")
    assert frames["chevron"][row] == CHEVRON and frames["chevron"][frames["address"].index("")] == ""
    graph = GraphView(state=s)
    assert graph.click(frames["cx"][row], frames["ty"][row] - 3) == "collapsed model.layers.1"


def test_the_scale_and_roll_up_menus_are_offered_only_for_a_value_overlay(tiny_loaded):
    """Coloured by op kind (the default) the scale and roll-up menus change nothing, so they are greyed out;
    a value overlay (FLOPs) makes them choices again, and going back to op kind greys them again."""
    from app.views.graph import OP_KIND

    graph = GraphView(state=ExplorerState(tiny_loaded))
    menus = (graph.overlay_scale, graph.overlay_rollup)
    assert graph.colour_by.value == OP_KIND and all(m.disabled for m in menus)
    graph.colour_by.value = "flops"
    assert not any(m.disabled for m in menus)
    graph.colour_by.value = OP_KIND
    assert all(m.disabled for m in menus)
