"""The backward's views without a browser: the switch appears only with a backward, keeps the two views in
step (expansion both ways, selection both ways), the inspector's backward rows, and the Memory tab's states."""
from __future__ import annotations

import pytest
import torch

import tracer
from app.explorer import build_app
from app.sources import Loaded
from app.views.backward import BackwardSwitch, backward_rows
from app.views.graph import GraphView
from app.views.memory import NOTHING, MemoryPanel
from tests.tracer.test_backward import _gpt2
from tests.tracer.test_backward_graph import gpt2_step


@pytest.fixture(scope="module")
def step():
    return gpt2_step()


def test_no_backward_no_switch(tiny_loaded):
    page = build_app(tiny_loaded)
    assert isinstance(page.tlx_centre, GraphView)
    panel = MemoryPanel(state=page.tlx_state)
    assert panel.table is None and NOTHING[:30] in panel._note.object


def test_the_switch_keeps_the_two_views_in_step(step):
    page = build_app(Loaded(step, "gpt2 step", "factory", "tests"))
    switch, state = page.tlx_centre, page.tlx_state
    assert isinstance(switch, BackwardSwitch) and switch.bgraph is None  # built on the first switch
    switch.toggle.value = "Backward"
    bstate = switch.bstate
    assert switch.showing is switch.bgraph and bstate.trace.model_class.endswith("(backward)")
    assert {"saved_bytes", "grad_norm"} <= set(switch.bgraph.colour_by.options.values())
    # expansion: forward -> backward and backward -> forward
    state.toggle("transformer.h.0")
    assert "transformer.h.0" in bstate.expanded
    bstate.toggle("transformer.h.1")
    assert "transformer.h.1" in state.expanded
    # selection: a backward node selects its forward op, a forward op selects its node
    bstate.select_op("grad_layer_norm_5")
    assert state.selected == "layer_norm_5"
    state.select_op("addmm_8")
    assert bstate.selected == "grad_addmm_8"
    assert "grad_addmm_8: AddmmBackward0 \u00b7 differentiates addmm_8 \u00b7 gradient norm" in switch.note.object
    switch.toggle.value = "Forward"
    assert switch.showing is switch.graph


def test_inspector_rows_name_the_node_gradient_and_saved_tensors(step):
    rows = dict(backward_rows(step, "addmm_8"))
    assert rows["backward node"].startswith("AddmmBackward0")
    assert float(rows["gradient norm"]) > 0 and rows["gradient"] == "(16, 64) float32"
    assert rows["saved for backward"].startswith("2 tensor(s)")
    assert rows["saved #1"].endswith("param transformer.h.1.mlp.c_proj.weight")
    assert backward_rows(tracer.trace(_gpt2(), (torch.randint(0, 128, (1, 16)),)), "addmm_8") == []


def test_the_memory_tab_shows_a_traces_own_backward(step):
    page = build_app(Loaded(step, "gpt2 step", "factory", "tests"))
    panel = MemoryPanel(state=page.tlx_state)
    assert panel.table is not None and panel._plot_box.visible
    markup = panel._table.object
    assert markup.count("tlx-memory-row") == 3  # layers 0 and 1 hold the same bytes: one row; the rest; the total
    assert "0-1 GPT2Block x2 (each)" in markup and "(rest): embedding, head, loss" in markup and "Measured" in markup
    assert not panel._controls.visible  # no config to estimate a step from


def test_a_config_opened_as_a_training_step_has_the_switch_and_its_own_memory_table(capsys):
    from app.cli import main
    from app.sources import open_config

    loaded = open_config("gpt2", (1, 8), training_step=True)
    assert loaded.trace.backward is not None and loaded.trace.backward.estimate
    assert loaded.title.endswith("(weights-free, training step)")
    page = build_app(loaded)
    assert isinstance(page.tlx_centre, BackwardSwitch)
    panel = MemoryPanel(state=page.tlx_state)
    assert "Estimate (weights-free" in panel._table.object and panel._controls.visible
    assert main(["--training-step", "--model", "tests.models:tiny_llama", "--no-browser"]) == 2
    assert "[invalid_input]" in capsys.readouterr().err


def test_the_export_tabs_model_explorer_file_carries_the_backward_graph(step, tmp_path):
    import json

    from app.worker_tasks import TASKS

    folder = step.save(str(tmp_path / "step"))
    request = {"kind": "model-explorer", "path": str(tmp_path / "g.json"), "trace": str(folder)}
    out = TASKS["export"](request, lambda _f, _t: None)["path"]
    graphs = json.loads(open(out, encoding="utf-8").read())["graphs"]
    assert [g["id"] for g in graphs] == ["GPT2LMHeadModel [OBSERVED]", "GPT2LMHeadModel (backward) [OBSERVED]"]
