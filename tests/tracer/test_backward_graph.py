"""The backward graph as a trace (module nesting, order, edges), the per-layer training-memory table, the
backward overlays, and gradient statistics: on an MLP, a CNN with BatchNorm in train mode, GPT-2 and Llama
built from small configs (random weights)."""
from __future__ import annotations

import math

import pytest
import torch
from torch import nn

import tracer
from exporters import overlays
from exporters.layout import LayoutEngine
from tests.tracer.test_backward import _gpt2, _llama
from tracer.backward.gradients import grad_stats
from tracer.backward.graph import LOSS_LABEL, backward_trace
from tracer.backward.memory import REST, layer_blocks, layer_table, op_saved_bytes, training_memory
from tracer.errors import InvalidInputError
from tracer.options import CaptureOptions

BACKWARD = CaptureOptions(backward=True)


def gpt2_step():
    """A 2-layer GPT-2 (random weights) captured with its backward; loss: the logits' sum."""
    model, ids = _gpt2(), torch.randint(0, 128, (1, 16))
    return tracer.trace(model, (ids,), capture=BACKWARD, loss=lambda o: o.logits.sum())


def _check_graph(t, b):
    """What every backward graph must be: one op per node (+ the loss), edges from a node to those it feeds,
    in an order where every edge points forward, each linked node inside its forward op's module call."""
    bw = t.backward
    assert len(b.ops) == len(bw.nodes) + 1 and b.ops[0].label == LOSS_LABEL
    index = {op.attrs["backward_node"]: op for op in b.ops[1:]}
    position = {op.label: i for i, op in enumerate(b.ops)}
    for node in bw.nodes:
        op = index[node.index]
        for j in node.next:  # the gradient edge node -> j is a parent edge of j's op
            assert op.label in [e.source for e in index[j].parents]
        if node.op is not None:
            assert tuple(op.module_stack) == tuple(t[node.op].module_stack) and op.attrs["forward_op"] == node.op
        if node.param is not None:
            assert op.params == (node.param,) and op.out.shape == t.params[node.param].shape
    assert all(position[e.source] < i for i, op in enumerate(b.ops) for e in op.parents)
    assert sum(len(n.next) for n in bw.nodes) + 1 == b.num_edges


def test_mlp_backward_graph_nests_like_the_forward():
    torch.manual_seed(0)
    mlp = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))
    t = tracer.trace(mlp, (torch.randn(3, 4),), capture=BACKWARD)
    b = backward_trace(t)
    _check_graph(t, b)
    assert b["grad_linear_2"].kind == "AddmmBackward0" and b["grad_linear_2"].module == "2"
    assert b["grad_2.weight"].kind == "AccumulateGrad" and b["grad_2.weight"].module == "2"
    assert b["grad_relu_1"].out.shape == (3, 8)  # the gradient it receives: the relu output's shape
    # the backward runs from the loss toward the first layer: grad_linear_2 before grad_linear_1
    labels = [op.label for op in b.ops]
    assert labels.index("grad_linear_2") < labels.index("grad_relu_1") < labels.index("grad_linear_1")
    # the layout engine draws it with the forward's frames
    lay = LayoutEngine(b).layout({"", "0", "1", "2"})
    assert {f.address for f in lay.frames} == {"", "0", "1", "2"}
    with pytest.raises(InvalidInputError):
        backward_trace(tracer.trace(mlp, (torch.randn(3, 4),)))


def test_batchnorm_cnn_in_train_mode_graph_overlays_and_gradient_statistics():
    torch.manual_seed(0)
    cnn = nn.Sequential(nn.Conv2d(3, 8, 3), nn.BatchNorm2d(8), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(),
                        nn.Linear(8, 4)).train()
    t = tracer.trace(cnn, (torch.randn(2, 3, 8, 8),), capture=BACKWARD, loss=lambda o: o.square().mean())
    b = backward_trace(t)
    _check_graph(t, b)
    bn = next(op.label for op in t.ops if op.func.endswith("batch_norm"))
    assert b[f"grad_{bn}"].module == "1" and "BatchNorm" in b[f"grad_{bn}"].kind
    # saved for backward: each tensor once, parameters left out; the same total on either graph
    per_op = op_saved_bytes(t.backward)
    assert sum(per_op.values()) == training_memory(t).total_saved_bytes
    for graph in (t, b):
        assert set(overlays.available(graph)) >= {"saved_bytes", "grad_norm"}
        assert sum(overlays.build_overlay(graph, "saved_bytes").ops.values()) == sum(per_op.values())
    # gradient norm: the saved gradient's L2 norm, on the forward op and on its node
    norms = overlays.build_overlay(t, "grad_norm").ops
    expected = float(torch.linalg.vector_norm(t.backward.grads[bn].double()))
    assert math.isclose(norms[bn], expected, rel_tol=1e-9)
    assert overlays.build_overlay(b, "grad_norm").ops[f"grad_{bn}"] == norms[bn]
    s = grad_stats(t.backward, bn)
    assert math.isclose(s["mean"], float(t.backward.grads[bn].double().mean()), abs_tol=1e-12)
    assert s["non_finite"] == 0 and s["numel"] == t.backward.grads[bn].numel()


def test_a_reloaded_backward_draws_and_offers_saved_bytes_and_gradient_norms(tmp_path):
    t = gpt2_step()
    back = tracer.load(t.save(str(tmp_path / "gpt2")))
    b = backward_trace(back)
    _check_graph(back, b)
    assert [op.label for op in b.ops] == [op.label for op in backward_trace(t).ops]
    assert {"saved_bytes", "grad_norm"} <= set(overlays.available(back))
    for mine, theirs in ((back, t), (b, backward_trace(t))):  # grad_norm after reload equals the capture's
        norms = overlays.build_overlay(mine, "grad_norm").ops
        assert norms and norms == overlays.build_overlay(theirs, "grad_norm").ops
    assert grad_stats(back.backward, "addmm_8") == grad_stats(t.backward, "addmm_8") is not None


def test_layer_table_per_block_with_and_without_checkpointing():
    loss = lambda o: o.logits.sum()  # noqa: E731
    plain = tracer.trace(*_llama(False, False), capture=BACKWARD, loss=loss)
    ckpt = tracer.trace(*_llama(False, True), capture=BACKWARD, loss=loss)
    assert layer_blocks(plain) == ("model.layers.0", "model.layers.1")
    table = layer_table(plain, ckpt)
    assert [r.layer for r in table.rows] == ["model.layers.0", "model.layers.1", REST]
    # every saved tensor lands in exactly one row: the rows sum to the step's total
    assert sum(r.saved_bytes for r in table.rows) == table.total_saved_bytes == training_memory(plain).total_saved_bytes
    assert table.total_saved_bytes_checkpointed == training_memory(ckpt).total_saved_bytes
    assert sum(r.param_bytes for r in table.rows) == table.total_param_bytes
    for r in table.rows[:2]:  # checkpointing lowers what each decoder layer holds
        assert r.saved_bytes_checkpointed < r.saved_bytes / 4
    assert "ckpt MiB" in table.table() and "model.layers.1" in table.table()


def test_meta_layer_table_equals_a_real_step_of_the_same_config():
    loss = lambda o: o.logits.sum()  # noqa: E731
    meta = CaptureOptions(structure_only=True, backward=True)
    real = layer_table(tracer.trace(*_llama(False, False), capture=BACKWARD, loss=loss),
                       tracer.trace(*_llama(False, True), capture=BACKWARD, loss=loss))
    estimate = layer_table(tracer.trace(*_llama(True, False), capture=meta, loss=loss),
                           tracer.trace(*_llama(True, True), capture=meta, loss=loss))
    assert estimate.estimate and not real.estimate
    assert [(r.layer, r.saved_bytes, r.saved_bytes_checkpointed, r.param_bytes) for r in estimate.rows] == \
        [(r.layer, r.saved_bytes, r.saved_bytes_checkpointed, r.param_bytes) for r in real.rows]


def test_a_model_without_numbered_blocks_has_only_the_rest():
    torch.manual_seed(0)

    class Two(nn.Module):
        def __init__(self):
            super().__init__()
            self.a, self.b = nn.Linear(4, 4), nn.Linear(4, 2)

        def forward(self, x):
            return self.b(torch.relu(self.a(x)))

    t = tracer.trace(Two(), (torch.randn(2, 4),), capture=BACKWARD)
    table = layer_table(t)
    assert [r.layer for r in table.rows] == [REST] and table.total_saved_bytes_checkpointed is None
    assert table.rows[0].saved_bytes == training_memory(t).total_saved_bytes


def test_the_backward_graph_saves_and_loads_with_its_own_labels(tmp_path):
    """The backward graph's module calls, nodes and saved tensors name its own ops, so its file loads
    (it once saved a file whose module calls named forward ops, refused on load) and each linked op finds its node."""
    t = gpt2_step()
    b = backward_trace(t)
    b.save(tmp_path / "b")
    loaded = tracer.load(tmp_path / "b")
    assert [op.label for op in loaded.ops] == [op.label for op in b.ops]
    labels = {op.label for op in b.ops}
    for scope in b.modules.values():
        for call in scope.calls:
            assert set(call.inputs) | set(call.outputs) <= labels
            inside = [op for op in b.ops if (scope.address, call.call) in tuple(op.module_stack)]
            assert (call.first_op, call.last_op) == ((inside[0].index, inside[-1].index) if inside else (-1, -1))
    linked = [op for op in b.ops[1:] if op.attrs["linked"]]
    assert linked and all(b.backward.node_of(op.label).index == op.attrs["backward_node"] for op in linked)
    assert set(loaded.backward.saved) == set(b.backward.saved) <= labels
