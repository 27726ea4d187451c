"""The Compare tab without a browser: twins of a real model, a trace file, a shipped config,
recolouring on a tolerance change, the jump to the first divergence, and typed refusals."""
from __future__ import annotations

import copy

import pytest
import torch

import tracer
from app.factory import open_factory
from app.sources import open_source
from app.state import ExplorerState
from app.views.compare import PATH_CHOICE, ComparePanel, second_side
from tests.models import tiny_gpt2


@pytest.fixture(scope="module")
def loaded():
    return open_factory("tests.models:tiny_gpt2", (1, 8))


def _panel(loaded) -> ComparePanel:
    return ComparePanel(state=ExplorerState(loaded))


def _fills(panel: ComparePanel) -> dict[str, str]:
    data = panel.figure.select_one({"name": "nodes"}).data_source.data
    return dict(zip(data["id"], data["fill"]))


def test_bf16_twin_draws_a_coloured_graph_with_both_sides(loaded):
    panel = _panel(loaded)
    panel.show(second_side(panel.state, "bfloat16 twin of this model", "", 1e-3))
    d = panel.diff
    assert d.b.description.endswith("bfloat16") and panel.rtol.value == d.tolerance.rtol  # the twin's tolerance
    assert "OBSERVED" in panel.sides.object and 'data-side="b"' in panel.sides.object
    assert "divergence" in panel.legend.object
    assert panel.figure is not None and len(set(_fills(panel).values())) > 1
    data = panel.figure.select_one({"name": "nodes"}).data_source.data
    notes = dict(zip(data["id"], data["diff"]))
    assert any("retyped" in n and "beyond tol" in n for n in notes.values())  # module boxes: roll-ups
    assert any("changed: dtype float32 -> bfloat16" in n for n in notes.values())  # op boxes: both dtypes


def test_tolerance_change_recolours_without_recomputing(loaded, tmp_path):
    model = loaded.model
    other = copy.deepcopy(model)
    with torch.no_grad():
        other.transformer.h[1].ln_1.weight.mul_(2.0)
    tracer.trace(other, loaded.inputs).save(tmp_path / "b")
    panel = _panel(loaded)
    panel.path.value = str(tmp_path / "b")
    panel.show(second_side(panel.state, PATH_CHOICE, str(tmp_path / "b"), 1e-3))
    before, divergences = _fills(panel), panel.diff.divergences
    assert panel.diff.first_divergence.module == "transformer.h.1.ln_1"
    panel.rtol.value = 10.0  # nothing is beyond a relative L2 of 10: every box turns neutral
    assert panel.diff.divergences is divergences and panel.diff.first_divergence is None
    assert _fills(panel) != before and len(set(_fills(panel).values())) == 1
    assert panel.jump.disabled and "recoloured in" in panel.note.object
    panel.rtol.value = 1e-3
    label = panel.jump_to_first()
    assert label == panel.diff.first_divergence.label_a
    assert panel.state.selected == label  # the explorer's own graph and inspector follow
    assert "transformer.h.1.ln_1" in panel.expanded
    node = panel.layout.node_of_op(label)
    yr, xr = panel.figure.y_range, panel.figure.x_range
    assert yr.end < node.y < yr.start and xr.start < node.x < xr.end  # the tab's graph shows it
    assert label in panel.stats.object and "mean" in panel.stats.object


def test_shipped_config_side_is_a_structure_diff():
    loaded = open_source("gpt2", None, (1, 8))
    panel = _panel(loaded)
    panel.show(second_side(panel.state, "shipped config: gpt2", "", 1e-3))
    assert panel.diff.is_empty and not panel.diff.values_compared
    assert "HYPOTHESIS" in panel.sides.object
    panel.show(second_side(panel.state, "attention eager twin", "", 1e-3))  # a meta twin: structure only
    assert not panel.diff.values_compared


def test_refusals_are_readable(loaded, tmp_path):
    panel = _panel(loaded)
    with pytest.raises(tracer.TracerError):
        second_side(panel.state, PATH_CHOICE, "", 1e-3)
    trace_only = open_source(str(tracer.trace(tiny_gpt2(), loaded.inputs).save(tmp_path / "t")), None, (1, 8))
    with pytest.raises(tracer.TracerError) as err:
        second_side(ExplorerState(trace_only), "bfloat16 twin of this model", "", 1e-3)
    assert err.value.code == "compare_twin_unsupported"
    panel._failed(err.value)
    assert "compare_twin_unsupported" in panel.note.object


def test_a_finished_comparison_colours_the_main_graph_until_cleared(loaded):
    """Issue 36 item 7: the explorer's own graph (not only the tab's) takes the divergence colours and
    legend; clearing (the tab's button or the legend's link) returns the colouring chosen before."""
    from exporters import overlays
    from app.views.graph import COMPARE, OP_KIND, GraphView

    state = ExplorerState(loaded)
    graph, panel = GraphView(state=state), ComparePanel(state=state)

    def fills() -> dict[str, str]:
        data = graph._node_source().data
        return dict(zip(data["id"], data["fill"]))

    before = fills()
    assert panel.clear.disabled and "divergence" not in graph.legend.object
    panel.show(second_side(state, "bfloat16 twin of this model", "", 1e-3))
    assert graph.colour_by.value == COMPARE and not panel.clear.disabled
    assert "divergence" in graph.legend.object and "Clear comparison colours" in graph.legend.object
    after = fills()
    palette = {overlays.palette_at(i / 100_000) for i in range(100_001)} | {overlays.NO_VALUE}
    assert after.keys() == before.keys() and after != before and set(after.values()) <= palette
    panel.rtol.value = 10.0  # nothing beyond: the main graph follows the tolerance too
    assert len(set(fills().values())) == 1 and fills() != after
    panel.clear.clicks += 1
    assert state.comparison is None and graph.colour_by.value == OP_KIND and fills() == before
    assert COMPARE not in graph.colour_by.options.values() and panel.clear.disabled
    graph.colour_by.value = "flops"  # a colouring chosen before the comparison is the one it returns to
    flops = fills()
    panel.show(second_side(state, "bfloat16 twin of this model", "", 1e-3))
    graph._view_action("clear-compare")  # the legend's link
    assert graph.colour_by.value == "flops" and fills() == flops
