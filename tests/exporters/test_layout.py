"""exporters.layout on real (tiny, random-weight) transformers and small custom modules."""
from __future__ import annotations

import pytest
import torch
from torch import nn

import tracer
from exporters.layout import compute_layout, default_expansion, group_tree, toggle
from tests.exporters.test_layout_checks import check_layout
from tests.models import looped_mlp, tiny_bert, tiny_gpt2, tiny_llama, tiny_resnet
from exporters.errors import LayoutModuleUnknownError

IDS = torch.tensor([[1, 2, 3, 4, 5]])


@pytest.fixture(scope="module")
def gpt2_12():
    return tracer.trace(tiny_gpt2(12), (IDS,), capture=tracer.CaptureOptions(save="none"))


@pytest.fixture(scope="module")
def llama():
    return tracer.trace(tiny_llama(2), (IDS,), capture=tracer.CaptureOptions(save="none"))


class Interleaved(nn.Module):
    """Parent ops between the blocks of a ModuleList: collapsing the list folds a cycle into one box."""

    def __init__(self) -> None:
        super().__init__()
        self.blocks = nn.ModuleList(nn.Linear(4, 4) for _ in range(3))

    def forward(self, x):
        for block in self.blocks:
            x = block(x) * 2
        return x


def test_default_expansion_opens_containers_down_to_repeated_blocks(gpt2_12, llama):
    assert default_expansion(gpt2_12) == {"", "transformer", "transformer.h"}
    assert default_expansion(llama) == {"", "model", "model.layers"}
    bert = tracer.trace(tiny_bert(2), (IDS,))
    assert default_expansion(bert) == {"", "encoder", "encoder.layer"}
    resnet = tracer.trace(tiny_resnet(), (torch.randn(1, 3, 16, 16),))
    assert default_expansion(resnet) == {"", "encoder", "encoder.stages"}


@pytest.mark.parametrize("fold", [False, True])
def test_invariants_default_and_fully_expanded(gpt2_12, fold):
    check_layout(compute_layout(gpt2_12, default_expansion(gpt2_12), fold_repeats=fold), gpt2_12)
    everything = group_tree(gpt2_12).addresses()
    full = compute_layout(gpt2_12, everything, fold_repeats=fold)
    check_layout(full, gpt2_12)
    assert {n.kind for n in full.nodes} == {"op", "io"}  # nothing collapsed: only ops are drawn
    calls = {entry for op in gpt2_12.ops for entry in op.module_stack}  # every module call, root included
    assert len(full.frames) == len(calls) + 1  # + the never-called ModuleList `transformer.h`


def test_collapsed_root_is_one_box_between_inputs_and_outputs(llama):
    lay = compute_layout(llama, ())
    check_layout(lay, llama)
    root = lay.node("mod:")
    assert root.kind == "module" and root.label == "LlamaForCausalLM" and not lay.frames
    assert {n.kind for n in lay.nodes} == {"io", "module"}
    assert all(lay.node(e.source).y < root.y for e in lay.edges if e.target == "mod:")


def test_root_frame_children_nest(llama):
    lay = compute_layout(llama, default_expansion(llama))
    check_layout(lay, llama)
    frames = {f.address: f for f in lay.frames}
    assert set(frames) == {"", "model", "model.layers"}
    assert frames["model.layers"].depth == 2 and frames["model.layers"].label == "layers: ModuleList"
    layers = [n for n in lay.nodes if n.kind == "module" and n.module.startswith("model.layers.")]
    assert [n.label for n in layers] == ["0: LlamaDecoderLayer", "1: LlamaDecoderLayer"]
    assert layers[0].y < layers[1].y  # layer 1 runs after layer 0: drawn below it
    # the KV cache's outputs are one io box; the logits keep their own
    cache = [n for n in lay.nodes if n.kind == "io" and n.repeat > 1]
    assert len(cache) == 1 and cache[0].repeat == 4 and cache[0].label == "cache: 4 outputs"
    assert lay.node_of_op(llama.outputs[1].label) is cache[0]


def test_layout_is_deterministic_across_captures(gpt2_12):
    again = tracer.trace(tiny_gpt2(12), (IDS,), capture=tracer.CaptureOptions(save="none"))
    exp = default_expansion(gpt2_12) | {"transformer.h.3", "transformer.h.3.attn"}
    a, b = compute_layout(gpt2_12, exp), compute_layout(again, exp)
    assert a.nodes == b.nodes and a.frames == b.frames and a.edges == b.edges
    assert compute_layout(gpt2_12, exp).nodes == a.nodes  # and across cache hits


def test_twelve_layer_gpt2_folds_to_one_block(gpt2_12):
    lay = compute_layout(gpt2_12, default_expansion(gpt2_12), fold_repeats=True)
    check_layout(lay, gpt2_12)
    folded = [n for n in lay.nodes if n.kind == "folded"]
    assert len(folded) == 1
    block = folded[0]
    assert block.label == "h.0-11: GPT2Block x12" and block.repeat == 12
    assert block.id == "fold:transformer.h.0"
    assert block.members == tuple(f"transformer.h.{i}" for i in range(12))
    assert not [n for n in lay.nodes if n.id.startswith("mod:transformer.h.")]
    assert lay.node_of_op(gpt2_12.ops_in("transformer.h.7")[0].label) is block
    unfolded = compute_layout(gpt2_12, default_expansion(gpt2_12))
    assert len([n for n in unfolded.nodes if n.id.startswith("mod:transformer.h.")]) == 12
    assert lay.height < unfolded.height
    none = compute_layout(gpt2_12, default_expansion(gpt2_12), fold_repeats=True, fold_min=13)
    assert not [n for n in none.nodes if n.kind == "folded"]


def test_expanding_one_block_splits_the_fold(gpt2_12):
    exp = toggle(default_expansion(gpt2_12), "transformer.h.5")
    lay = compute_layout(gpt2_12, exp, fold_repeats=True)
    check_layout(lay, gpt2_12)
    assert sorted(n.label for n in lay.nodes if n.kind == "folded") == [
        "h.0-4: GPT2Block x5", "h.6-11: GPT2Block x6"]
    assert "transformer.h.5" in {f.address for f in lay.frames}


def test_toggle_expands_and_collapses(gpt2_12):
    base = default_expansion(gpt2_12)
    opened = toggle(base, "transformer.h.0")
    assert opened == base | {"transformer.h.0"} and toggle(opened, "transformer.h.0") == base
    before, after = compute_layout(gpt2_12, base), compute_layout(gpt2_12, opened)
    check_layout(after, gpt2_12)
    assert "mod:transformer.h.0" in {n.id for n in before.nodes}
    assert "mod:transformer.h.0" not in {n.id for n in after.nodes}
    frame = next(f for f in after.frames if f.address == "transformer.h.0")
    inner = [n for n in after.nodes if n.module and n.module.startswith("transformer.h.0.")]
    assert {n.id for n in inner} >= {"mod:transformer.h.0.attn", "mod:transformer.h.0.mlp"}
    assert all(frame.x0 <= n.x <= frame.x1 and frame.y0 <= n.y <= frame.y1 for n in inner)
    assert after.height > before.height
    assert compute_layout(gpt2_12, toggle(opened, "transformer.h.0")).nodes == before.nodes


def test_interleaved_container_gives_declared_back_edges():
    torch.manual_seed(0)
    trace = tracer.trace(Interleaved(), (torch.randn(2, 4),))
    collapsed = compute_layout(trace, ("",))
    check_layout(collapsed, trace)
    back = [e for e in collapsed.edges if e.back_edge]
    assert back and all(e.target == "mod:blocks" for e in back)
    assert all(collapsed.node(e.target).y < collapsed.node(e.source).y for e in back)
    opened = compute_layout(trace, ("", "blocks"))
    check_layout(opened, trace)
    assert any(e.back_edge for e in opened.edges)  # mul -> next block re-enters the frame above
    folded = compute_layout(trace, ("", "blocks"), fold_repeats=True)
    check_layout(folded, trace)
    block = folded.node("fold:blocks.0")
    assert block.repeat == 3 and block.label == "blocks.0-2: Linear x3"
    assert any(e.back_edge and e.target == block.id for e in folded.edges)


class _Looped(nn.Module):
    def __init__(self):
        super().__init__()
        self.inp, self.block, self.out = nn.Linear(8, 8), nn.Sequential(nn.Linear(8, 8), nn.GELU()), nn.Linear(8, 2)

    def forward(self, x):
        x = self.inp(x)
        for _ in range(3):
            x = self.block(x)
        return self.out(x)


@pytest.mark.parametrize("fold", [False, True], ids=["plain", "fold-repeats"])
def test_a_looped_module_folds_into_one_box_with_its_call_count(fold):
    trace = tracer.trace(_Looped(), (torch.randn(2, 8),))
    lay = compute_layout(trace, ("",), fold_repeats=fold)
    check_layout(lay, trace)
    (box,) = [n for n in lay.nodes if n.module == "block"]
    assert box.kind == "folded" and box.repeat == 3 and box.label == "block: Sequential x3 calls"
    listed = compute_layout(trace, ("", "block#"), fold_repeats=fold)  # the calls, each its own box
    check_layout(listed, trace)
    assert [n.id for n in listed.nodes if n.module == "block"] == ["mod:block", "mod:block:1", "mod:block:2"]


def test_a_looped_residual_block_folds_with_the_adds_between_its_calls():
    """`x = x + block(x)` three times: the calls are not neighbours, yet fold into one box; edges back
    into it are drawn as back edges, and no edge crosses a box."""
    trace = tracer.trace(looped_mlp(3), (torch.randn(2, 16),))
    for fold in (False, True):
        lay = compute_layout(trace, ("",), fold_repeats=fold)
        check_layout(lay, trace)
        (box,) = [n for n in lay.nodes if n.module == "block"]
        assert box.id == "fold:block" and box.label == "block: Sequential x3 calls"
        assert sum(n.op_label is not None and n.op_label.startswith("add") for n in lay.nodes) == 3
        assert any(e.back_edge and e.target == box.id for e in lay.edges)


def test_opening_one_call_of_a_looped_module_opens_only_that_call():
    trace = tracer.trace(looped_mlp(3), (torch.randn(2, 16),))
    one = compute_layout(trace, ("", "block#", "block#1"))
    check_layout(one, trace)
    assert [(f.address, f.call) for f in one.frames if f.address == "block"] == [("block", 1)]
    assert {"mod:block", "mod:block:2"} <= {n.id for n in one.nodes}  # the other calls stay boxes
    every = compute_layout(trace, ("", "block"))  # the plain address still opens every call
    check_layout(every, trace)
    assert sorted(f.call for f in every.frames if f.address == "block") == [0, 1, 2]
    with pytest.raises(LayoutModuleUnknownError):
        compute_layout(trace, ("", "block#7"))


class _SharedActivation(nn.Module):
    def __init__(self):
        super().__init__()
        self.a, self.b, self.act = nn.Linear(8, 8), nn.Linear(8, 8), nn.ReLU()

    def forward(self, x):
        return self.act(self.b(self.act(self.a(x))))


def test_a_one_op_module_used_twice_is_no_loop():
    trace = tracer.trace(_SharedActivation(), (torch.randn(2, 8),))
    lay = compute_layout(trace, ("",))
    check_layout(lay, trace)
    assert [n.id for n in lay.nodes if n.module == "act"] == ["mod:act", "mod:act:1"]  # in execution order


def test_toggling_calls_moves_between_the_loop_box_the_calls_and_one_open_call():
    from exporters.layout.calls import path_entries, toggle_module

    trace = tracer.trace(looped_mlp(3), (torch.randn(2, 16),))
    root = frozenset({""})
    listed = toggle_module(root, "block", 3)
    assert listed == {"", "block#"}
    opened = toggle_module(listed, "block", 3, call=2)
    assert opened == {"", "block#", "block#2"}
    assert toggle_module(opened, "block", 3, call=2) == listed
    assert toggle_module(opened, "block", 3) == root  # the loop box folds back, its open call with it
    assert toggle_module(frozenset({"", "block"}), "block", 3, call=0) == {"", "block#", "block#1", "block#2"}
    op = next(o for o in trace.ops if o.module_stack and o.module_stack[-1] == ("block.2", 1))
    entries = path_entries(op.module, op.module_stack, trace.modules)
    assert {"block#1", "block.2#1"} <= entries and "block" not in entries  # only the calls the op ran in
    check_layout(lay := compute_layout(trace, entries), trace)
    assert {(f.address, f.call) for f in lay.frames} == {("", 0), ("block", 1), ("block.2", 1)}


def test_unknown_address_is_refused(llama):
    with pytest.raises(LayoutModuleUnknownError) as info:
        compute_layout(llama, ("", "model.layerz"))
    assert info.value.code == "layout_unknown_module" and info.value.findings["unknown"] == ["model.layerz"]
    assert info.value.remedy and info.value.site
