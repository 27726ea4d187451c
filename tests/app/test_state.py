"""The session state: expansion, selection, search, and the ladder it shows."""
from __future__ import annotations

from app.ladder import ladder_view
from app.state import ExplorerState


def test_default_expansion_shows_the_decoder_layers_as_boxes(tiny_loaded):
    s = ExplorerState(tiny_loaded)
    assert {"", "model", "model.layers"} <= s.expanded
    boxes = [n for n in s.layout.nodes if n.kind == "module"]
    assert sorted(n.module for n in boxes if n.module.startswith("model.layers.")) == ["model.layers.0", "model.layers.1"]


def test_toggle_expands_and_collapses_a_layer(tiny_loaded):
    s = ExplorerState(tiny_loaded)
    before = {n.id for n in s.layout.nodes}
    s.toggle("model.layers.0")
    after = {n.id for n in s.layout.nodes}
    assert "mod:model.layers.0" in before and "mod:model.layers.0" not in after
    assert any(f.address == "model.layers.0" for f in s.layout.frames)
    s.toggle("model.layers.0")
    assert {n.id for n in s.layout.nodes} == before


def test_search_selects_an_op_and_opens_its_modules(tiny_loaded):
    s = ExplorerState(tiny_loaded)
    op = next(o for o in s.trace.ops if o.module.startswith("model.layers.1.mlp"))
    assert s.search(op.label)[0] == ("op", op.label)
    s.go(op.label)
    assert s.selected == op.label
    assert {"model.layers.1", "model.layers.1.mlp"} <= s.expanded
    assert s.layout.node_of_op(op.label).op_label == op.label
    assert "Nothing matches" in s.go("zzz-no-such-thing")


def test_sessions_discharge_their_own_copy_of_the_shared_trace(gpt2_loaded):
    a, b = ExplorerState(gpt2_loaded), ExplorerState(gpt2_loaded)
    assert a.trace is not b.trace and a.trace.ops is b.trace.ops
    a.trace.envelope = a.trace.envelope.evolve("test", outcome="edited")  # evolve cannot move the ladder
    assert b.trace.envelope.outcome == gpt2_loaded.trace.envelope.outcome == "captured"
    assert b.trace.ladder_state == "HYPOTHESIS" and gpt2_loaded.trace.ladder_state == "HYPOTHESIS"


def test_params_under_counts_a_module_subtree(gpt2_loaded):
    s = ExplorerState(gpt2_loaded)
    assert s.params_under("") == s.trace.param_count() == 124_439_808
    block = s.params_under("transformer.h.0")
    assert block == sum(r.numel for r in s.trace.params.values()
                        if r.address.startswith("transformer.h.0.") and not r.is_buffer)


def test_ladder_view_words_for_each_state(tiny_loaded, gpt2_loaded):
    assert ladder_view(tiny_loaded.trace).state == "OBSERVED"
    lv = ladder_view(gpt2_loaded.trace)
    assert lv.state == "HYPOTHESIS" and "no values exist" in lv.headline


def deep_llama():
    from tests.models import tiny_llama

    return tiny_llama(n_layer=90)


def test_a_deep_model_starts_folded_and_unfolds_on_request():
    from app.factory import open_factory
    from app.state import AUTO_FOLD_NODES

    s = ExplorerState(open_factory("tests.app.test_state:deep_llama"))
    assert s.fold_repeats is True and len(s.layout.nodes) <= AUTO_FOLD_NODES
    folded = [n for n in s.layout.nodes if n.kind == "folded"]
    assert len(folded) == 1 and folded[0].repeat == 90
    s.fold_repeats = False
    assert len([n for n in s.layout.nodes if n.kind == "module" and n.module.startswith("model.layers.")]) == 90


def test_search_filters_by_op_kind_module_class_and_shape(default_loaded):
    from app.state import parse_query

    assert parse_query("mlp kind:Linear shape:4096") == (["mlp"], {"kind": "linear", "shape": "4096"})
    s = ExplorerState(default_loaded)
    hits = s.search("kind:linear class:LlamaMLP", limit=None)
    assert len(hits) == 3 * 32 and all(kind == "op" and s.trace[i].kind == "linear" for kind, i in hits)
    assert all(s.trace[i].module.endswith(("gate_proj", "up_proj", "down_proj")) for _, i in hits)
    wide = s.search("shape:14336", limit=None)
    assert wide and all("14336" in map(str, s.trace[i].out.shape) for _, i in wide)
    assert s.search("q_proj kind:linear", limit=None) == [("op", o.label) for o in s.trace.ops
                                                         if o.module.endswith("q_proj") and o.kind == "linear"]
    assert s.search("kind:no_such_kind", limit=None) == []


def test_the_inspector_lists_every_hit_with_its_module_path(default_loaded):
    from app.views.inspector import Inspector

    s = ExplorerState(default_loaded)
    inspector = Inspector(state=s)
    s.go("kind:linear class:LlamaMLP")
    markup = inspector._pane.object
    assert "96 hits for" in markup and markup.count('class="tlx-hit"') == 96
    assert "model.layers.31.mlp.down_proj" in markup and 'data-tlx-act="op:' in markup
