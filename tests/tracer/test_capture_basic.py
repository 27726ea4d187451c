"""Capture on hand-written models: ops, edges and attribution checked against hand-derived expectations."""
from __future__ import annotations

import inspect

import pytest
import torch
from torch import nn

import tracer
from tracer import CaptureOptions


class MLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(4, 8)
        self.act = nn.ReLU()
        self.fc2 = nn.Linear(8, 3)

    def forward(self, x):
        return self.fc2(self.act(self.fc1(x)))


def _edges(t):
    return [(e.source, op.label, e.position) for op in t for e in op.parents]


def test_mlp_ops_edges_and_attribution(seeded):
    m = MLP()
    x = torch.randn(2, 4)
    t = tracer.trace(m, (x,))
    assert [op.label for op in t] == ["input_1", "linear_1", "relu_1", "linear_2", "output_1"]
    assert [op.func for op in t][1:4] == [
        "torch.nn.functional.linear", "torch.nn.functional.relu", "torch.nn.functional.linear"]
    assert _edges(t) == [("input_1", "linear_1", "0"), ("linear_1", "relu_1", "0"),
                         ("relu_1", "linear_2", "0"), ("linear_2", "output_1", "0")]
    assert t["linear_1"].params == ("fc1.weight", "fc1.bias")
    assert t["linear_2"].params == ("fc2.weight", "fc2.bias")
    assert t["relu_1"].module == "act"
    assert t["linear_1"].out.shape == (2, 8) and t["linear_1"].out.dtype == "float32"
    assert t["linear_1"].out.requires_grad is True
    assert torch.equal(t.output, m(x))
    assert torch.equal(t.values["linear_2"], m(x).detach())
    assert t.param_count() == sum(p.numel() for p in m.parameters())
    assert set(t.modules) == {"", "fc1", "act", "fc2"}
    assert t.modules["fc1"].class_name == "Linear" and t.modules["fc1"].params == ("fc1.weight", "fc1.bias")
    assert t.modules[""].children == ("fc1", "act", "fc2")
    assert [o.label for o in t.ops_in("fc2")] == ["linear_2"]


def test_source_line_points_at_model_code(seeded):
    m = MLP()
    t = tracer.trace(m, (torch.randn(1, 4),))
    line = inspect.getsourcelines(MLP.forward)[1] + 1
    src = t["linear_1"].source
    assert src is not None and src.file.endswith("test_capture_basic.py")
    assert src.line == line and src.function == "forward"


def test_line_at_is_the_frame_line_for_every_instruction():
    """`line_at` reads a code's line table once and bisects it: the line for each offset is the one Python's
    own table gives (what a frame reports as f_lineno), also past the last instruction."""
    from tracer.capture.session import line_at

    def scan(code, offset):  # the definition: the first range holding the offset that has a line
        return next((line for start, end, line in code.co_lines() if start <= offset < end and line is not None),
                    code.co_firstlineno)

    for code in (Branchy.forward.__code__, test_source_line_points_at_model_code.__code__,
                 nn.Module._call_impl.__code__):
        for offset in range(0, len(code.co_code) + 4, 2):
            assert line_at(code, offset) == scan(code, offset), (code.co_name, offset)
    frame = inspect.currentframe()
    assert line_at(frame.f_code, frame.f_lasti) == frame.f_lineno


class Branchy(nn.Module):
    """Python loops and branches, a module called twice, in-place ops, views, getitem/setitem."""

    def __init__(self):
        super().__init__()
        self.shared = nn.Linear(6, 6)
        self.register_buffer("scale", torch.tensor(2.0))

    def forward(self, x, flag=True):
        for _ in range(2):
            x = self.shared(x)
        if flag:
            x = x * self.scale
        y = x.view(2, 3, 2)
        y = y[:, 1]
        z = torch.zeros(2, 2)
        z[0] = y[0]
        z += 1
        z.mul_(3)
        return {"out": z, "pair": (x.sum(), y)}


def test_loops_module_reuse_inplace_views_and_dict_outputs(seeded):
    m = Branchy()
    x = torch.randn(2, 6)
    t = tracer.trace(m, (x,), {"flag": True})
    kinds = [op.kind for op in t]
    assert kinds == ["input", "linear", "linear", "mul", "view", "getitem", "zeros", "getitem", "setitem",
                     "add_", "mul_", "sum", "output", "output", "output"]
    lin1, lin2 = t["linear_1"], t["linear_2"]
    assert (lin1.module, lin1.module_call) == ("shared", 0)
    assert (lin2.module, lin2.module_call) == ("shared", 1)
    assert lin2.module_address == "shared:1"
    assert len(t.modules["shared"].calls) == 2
    assert t["mul_1"].params == ("scale",)
    # setitem writes into the zeros tensor: its parents are the target and the value.
    setitem = t["setitem_1"]
    assert setitem.inplace and [(e.source, e.position) for e in setitem.parents] == [("zeros_1", "0"), ("getitem_2", "2")]
    # later in-place ops chain on the written version
    assert [e.source for e in t["add__1"].parents] == ["setitem_1"]
    assert [e.source for e in t["mul__1"].parents] == ["add__1"]
    outs = {op.io_path: op for op in t.outputs}
    assert set(outs) == {"out", "pair.0", "pair.1"}
    assert outs["out"].parents[0].source == "mul__1"
    # saved values are the value right after each op, even though z was changed in place later
    assert torch.equal(t.values["zeros_1"], torch.zeros(2, 2))
    assert torch.equal(t.values["add__1"], t.values["setitem_1"] + 1)
    expected = m(x, flag=True)
    assert torch.equal(t.output["out"], expected["out"])
    assert torch.equal(t.output["pair"][0], expected["pair"][0])


def test_branch_not_taken_is_not_recorded(seeded):
    t = tracer.trace(Branchy(), (torch.randn(2, 6),), {"flag": False})
    assert "mul_1" not in t and t.kind_counts()["linear"] == 2


def test_multi_output_call_ids(seeded):
    class Splitter(nn.Module):
        def forward(self, x):
            a, b, c = torch.split(x, 2, dim=1)
            return a + c, b

    t = tracer.trace(Splitter(), (torch.randn(3, 6),))
    splits = [op for op in t if op.kind == "split"]
    assert [op.output_index for op in splits] == [0, 1, 2]
    assert len({op.func_call_id for op in splits}) == 1 and all(op.num_outputs == 3 for op in splits)
    assert [e.source for e in t["add_1"].parents] == ["split_1", "split_3"]
    assert isinstance(t.output, tuple)


def test_batchnorm_train_records_buffer_writes_eval_does_not(seeded):
    cnn = nn.Sequential(nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4), nn.ReLU(inplace=True))
    x = torch.randn(2, 3, 8, 8)
    ref = nn.Sequential(nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4), nn.ReLU(inplace=True))
    ref.load_state_dict(cnn.state_dict())
    cnn.train()
    ref.train()
    t = tracer.trace(cnn, (x,))
    assert torch.equal(t.output, ref(x))
    assert torch.equal(cnn[1].running_mean, ref[1].running_mean)  # updated exactly once, like a direct call
    bn = next(op for op in t if op.kind == "batch_norm")
    assert set(bn.buffer_writes) == {"1.running_mean", "1.running_var"}
    nbt = next(op for op in t if op.kind == "add_")
    assert nbt.buffer_writes == ("1.num_batches_tracked",) and nbt.params == ("1.num_batches_tracked",)
    relu = t["relu_1"]
    assert relu.inplace and relu.parents[0].source == bn.label
    assert not torch.equal(t.values[bn.label], t.values["relu_1"])  # the pre-ReLU value was kept
    cnn.eval()
    te = tracer.trace(cnn, (x,))
    assert all(not op.buffer_writes for op in te)
    assert "add__1" not in te


def test_save_policies_and_inference_only(seeded):
    m = MLP()
    x = torch.randn(2, 4)
    assert tracer.trace(m, (x,), capture=CaptureOptions(save="none")).values == {}
    only_linear = tracer.trace(m, (x,), capture=CaptureOptions(save=lambda op: op.kind == "linear"))
    assert set(only_linear.values) == {"linear_1", "linear_2"}
    inf = tracer.trace(m, (x,), capture=CaptureOptions(inference_only=True))
    assert inf.output.grad_fn is None and not inf.output.requires_grad
    assert torch.equal(inf.output, m(x).detach())
    with pytest.raises(tracer.errors.InvalidInputError):
        CaptureOptions(save="some")


def test_tied_parameters_and_tensor_created_inside(seeded):
    class Tied(nn.Module):
        def __init__(self):
            super().__init__()
            self.emb = nn.Embedding(10, 4)
            self.head = nn.Linear(4, 10, bias=False)
            self.head.weight = self.emb.weight

        def forward(self, ids):
            pos = torch.arange(ids.shape[1])
            return self.head(self.emb(ids) + pos[None, :, None].float())

    m = Tied()
    t = tracer.trace(m, (torch.tensor([[1, 2, 3]]),))
    assert t.params["emb.weight"].tied == ("head.weight",)
    assert t.param_count() == 40
    arange = t["arange_1"]
    assert arange.parents == () and arange.out.shape == (3,)
    assert t["linear_1"].params == ("emb.weight",)


def test_bad_inputs_are_typed():
    with pytest.raises(tracer.errors.InvalidInputError) as err:
        tracer.trace("not a model", ())
    assert err.value.code == "invalid_input" and err.value.remedy
    with pytest.raises(tracer.errors.InvalidInputError):
        tracer.trace(MLP(), 3)


def test_mutation_through_a_view_is_disclosed_and_the_value_saved_as_produced():
    class ViewMut(nn.Module):
        def forward(self, x):
            y = x * 1
            v = y[0]
            y.add_(1)  # changes v's storage behind its back
            return v + 0

    t = tracer.trace(ViewMut(), (torch.randn(3, 4),))
    # copy-on-write: v's value is the one it had when produced, not the mutated one
    assert torch.equal(t.values["getitem_1"], t.values["mul_1"][0])
    assert any("op #2 (torch.Tensor.__getitem__)" in w and "op #3 (torch.Tensor.add_)" in w
               and "without an edge" in w for w in t.warnings)
    assert torch.equal(t.values["add_1"], t.output)
    report = tracer.validate(t)  # the reader's missing dependence on the write is a named replay failure
    assert not report.passed and report.first_failing_op == "add_1" and report.findings[0].check == "replay"


def test_iterating_a_tensor_records_each_row():
    class Rows(nn.Module):
        def forward(self, x):
            return torch.stack([r * 2 for r in x])

    t = tracer.trace(Rows(), (torch.randn(3, 4),))
    assert [e.source for e in t["stack_1"].parents] == ["mul_1", "mul_2", "mul_3"]
    assert [e.source for e in t["mul_2"].parents] == ["unbind_2"]
    assert {e.source for op in t if op.kind == "unbind" for e in op.parents} == {"input_1"}


def test_save_none_keeps_no_activation_alive_during_the_forward():
    import weakref

    class Drops(nn.Module):
        def forward(self, x):
            y = x * 2
            self.ref = weakref.ref(y)
            z = y + 1
            del y
            self.alive_mid_forward = self.ref() is not None
            return z

    m = Drops()
    t = tracer.trace(m, (torch.randn(3),), capture=CaptureOptions(save="none"))
    assert m.alive_mid_forward is False  # freed at its last use, as in a plain forward
    assert [e.source for e in t["add_1"].parents] == ["mul_1"]  # the edge is still recorded
    tracer.trace(m, (torch.randn(3),))
    assert m.alive_mid_forward is True  # save="all" keeps it, as asked
