"""[issue 7] Foreign-kernel boundaries: autograd Functions, torch.library custom ops, numpy/DLPack trips.

Hand-written kernels with known dependence: `PairKernel` has a second output that does not
read its bias, `HintKernel` never reads its second argument, `tlx::triple` is a custom op
whose three outputs each read a different subset of its inputs.
"""
from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch
from torch import nn

import tracer
from tracer import errors
from tracer.capture.boundaries import ForeignKernelWarning
from tracer.replay import declare_dependence, forget_dependence

X = torch.randn(3, 8, generator=torch.Generator().manual_seed(1))


class PairKernel(torch.autograd.Function):
    """(x * w + b, tanh(x * w)): output 1 does not read b."""

    @staticmethod
    def forward(ctx, x, w, b):
        ctx.save_for_backward(x, w)
        prod = x * w
        return prod + b, torch.tanh(prod)

    @staticmethod
    def backward(ctx, g0, g1):
        x, w = ctx.saved_tensors
        g = g0 + g1 * (1 - torch.tanh(x * w) ** 2)
        return g * w, g * x, g0


class HintKernel(torch.autograd.Function):
    """sigmoid(x); the second argument is a shape hint whose values are never read."""

    @staticmethod
    def forward(ctx, x, hint):
        return torch.sigmoid(x).reshape(hint.shape)

    @staticmethod
    def backward(ctx, g):
        return g, None


class FailingKernel(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        raise RuntimeError("kernel launch failed")


@torch.library.custom_op("tlx::triple", mutates_args=())
def triple(x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    return x * y, x.exp(), y * 2


@triple.register_fake
def _triple_fake(x, y):
    return torch.empty_like(x), torch.empty_like(x), torch.empty_like(y)


class FunctionNet(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.lin = nn.Linear(8, 8)
        self.w = nn.Parameter(torch.randn(8))
        self.head = nn.Linear(8, 4)

    def forward(self, x):
        h = self.lin(x)
        b = h.mean(dim=0)
        a, t = PairKernel.apply(h, self.w, b)
        a2, t2 = PairKernel.apply(a, self.w, b)  # a second call of the same class: one warning only
        s = HintKernel.apply(t + t2, torch.zeros_like(t))
        return self.head(a2 + s)


class CustomOpNet(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.lin = nn.Linear(8, 8)

    def forward(self, x):
        h = self.lin(x)
        p, e, d = triple(h, x)
        return p + e + d


class NumpyNet(nn.Module):
    def __init__(self, reentry: str) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.lin = nn.Linear(8, 8)
        self.head = nn.Linear(8, 4)
        self.reentry = reentry

    def forward(self, x):
        h = self.lin(x)
        if self.reentry == "dlpack":
            back = torch.from_dlpack(h.detach().contiguous())  # leaves through __dlpack__, shares memory
        else:
            arr = np.tanh(h.detach().numpy())
            back = torch.from_numpy(arr) if self.reentry == "from_numpy" else torch.tensor(arr)
        return self.head(back * 2)


def _trace_warned(model, x=X):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        t = tracer.trace(model, (x,))
    return t, [w for w in caught if issubclass(w.category, ForeignKernelWarning)]


def _declared(*pairs):
    keys = [declare_dependence(k, reads) for k, reads in pairs]
    return keys


@pytest.fixture(autouse=True)
def _clean_kernel_table():
    yield
    for k in (PairKernel, HintKernel, triple):
        forget_dependence(k)


# -- autograd Functions ---------------------------------------------------------------------------
def test_function_is_one_boundary_op_with_its_inputs_outputs_and_name():
    model = FunctionNet().eval()
    direct = model(X)
    t, warned = _trace_warned(model)
    assert torch.equal(t.output, direct)
    from tracer.capture import boundaries

    assert torch.autograd.Function.__dict__["apply"] is boundaries.PASS_THROUGH  # installed once, passes through
    pair = [op for op in t.ops if op.func.endswith("PairKernel")]
    assert [op.kind for op in pair] == ["autograd_function"] * 4
    assert pair[0].func == f"{__name__}.PairKernel"
    assert [(op.output_index, op.num_outputs) for op in pair] == [(0, 2), (1, 2), (0, 2), (1, 2)]
    assert pair[0].func_call_id == pair[1].func_call_id != pair[2].func_call_id
    # parents are its tensor inputs (x at 0, b at 2), the parameter at 1 is attributed, not an edge
    assert [e.position for e in pair[0].parents] == ["0", "2"] and pair[0].params == ("w",)
    assert t[pair[0].parents[0].source].kind == "linear" and t[pair[0].parents[1].source].kind == "mean"
    assert pair[0].module == "" and pair[0].source is not None and pair[0].source.function == "forward"
    # nothing from inside forward was recorded: no tanh/mul/sigmoid ops at all
    assert not {"tanh", "mul", "sigmoid", "reshape"} & set(t.kind_counts())
    # outputs are its outputs: the consumers read the boundary ops' values
    assert torch.equal(t.values[pair[0].label], PairKernel.apply(t.values[pair[0].parents[0].source], model.w,
                                                                 t.values[pair[0].parents[1].source])[0])
    hint = next(op for op in t.ops if op.func.endswith("HintKernel"))
    assert [e.position for e in hint.parents] == ["0", "1"]
    # disclosed once per class per capture, in warnings and trace.warnings; provenance names the ops
    names = sorted(str(w.message).split("Function ")[1].split(" ")[0] for w in warned)
    assert names == [f"{__name__}.HintKernel", f"{__name__}.PairKernel"]
    assert sum("PairKernel" in w for w in t.warnings) == 1
    assert set(t.provenance["foreign_kernels"]) == {op.label for op in pair} | {hint.label}
    assert t.provenance["foreign_kernels"][hint.label] == {"boundary": "autograd_function",
                                                          "name": f"{__name__}.HintKernel"}


def test_function_replays_by_calling_apply_again():
    t, _ = _trace_warned(FunctionNet().eval())
    pair = next(op for op in t.ops if op.func.endswith("PairKernel"))
    func, args, kwargs = t.live_calls[pair.label]
    out = func(*args, **kwargs)  # outside the capture: the original apply, nothing recorded
    assert torch.equal(out[0], t.values[pair.label])


def test_perturbation_excuses_exactly_the_declared_edges():
    model = FunctionNet().eval()
    # undeclared: PairKernel's output 1 ignores b, HintKernel ignores its hint -> two edge findings
    t, _ = _trace_warned(model)
    assert not (report := tracer.validate(t))
    found = [(f["label"], f["check"]) for f in report.to_dict()["findings"]]
    pair1 = [op.label for op in t.ops if op.func.endswith("PairKernel") and op.output_index == 1]
    hint = next(op.label for op in t.ops if op.func.endswith("HintKernel"))
    assert found == [(pair1[0], "edge"), (pair1[1], "edge"), (hint, "edge")]
    assert all("(argument 2)" in f["message"] for f in report.to_dict()["findings"][:2])
    # declare PairKernel only: its edges are excused, HintKernel's still fails (nothing else is excused)
    declare_dependence(PairKernel, {0: (0, 1, 2), 1: (0, 1)})
    t, _ = _trace_warned(model)
    assert not (report := tracer.validate(t))
    assert [(f["label"], f["check"]) for f in report.to_dict()["findings"]] == [(hint, "edge")]
    # declare both: validation passes, and the only excused foreign edge is the hint
    declare_dependence(HintKernel, {0: ("0",)})
    t, _ = _trace_warned(model)
    assert (report := tracer.validate(t)), report.to_dict()["findings"]
    excused = [(label, pos) for label, pos, _why in report.to_dict()["excused"]]
    assert [e for e in excused if e[0] in t.provenance["foreign_kernels"]] == [(hint, "1")]
    assert [e for e in excused if e[0] not in t.provenance["foreign_kernels"]] == [("zeros_like_1", "0")]


def test_a_wrong_declaration_does_not_excuse_other_outputs():
    declare_dependence(PairKernel, {1: (0, 1)})  # output 0 undeclared: must still read every argument
    t, _ = _trace_warned(FunctionNet().eval())
    report = tracer.validate(t)
    labels = {f["label"] for f in report.to_dict()["findings"]}
    assert not any(t[label].func.endswith("PairKernel") for label in labels)
    declare_dependence(PairKernel, {0: (0, 1), 1: (0, 1)})  # claims output 0 ignores b: it does not
    t, _ = _trace_warned(FunctionNet().eval())
    report = tracer.validate(t)
    pair0 = [op.label for op in t.ops if op.func.endswith("PairKernel") and op.output_index == 0]
    assert not set(pair0) & {f["label"] for f in report.to_dict()["findings"]}  # excused as declared


def test_failed_capture_leaves_function_apply_passing_through():
    class Broken(nn.Module):
        def forward(self, x):
            return FailingKernel.apply(x * 2)

    from tracer.capture import boundaries

    with pytest.raises(RuntimeError, match="kernel launch failed"), pytest.warns(ForeignKernelWarning):
        tracer.trace(Broken(), (X,))
    assert boundaries.apply_is_torchs()

    assert getattr(boundaries._active, "session", None) is None
    assert torch.equal(PairKernel.apply(X, X, X)[0], X * X + X)  # Functions run normally afterwards


# -- torch.library custom ops ----------------------------------------------------------------------
def test_custom_op_with_several_outputs_is_one_call():
    model = CustomOpNet().eval()
    direct = model(X)
    t, warned = _trace_warned(model)
    assert torch.equal(t.output, direct) and not warned
    ops = [op for op in t.ops if op.kind == "tlx_triple"]
    assert [op.func for op in ops] == ["torch.ops.tlx.triple"] * 3
    assert [(op.output_index, op.num_outputs) for op in ops] == [(0, 3), (1, 3), (2, 3)]
    assert len({op.func_call_id for op in ops}) == 1
    assert [e.position for e in ops[0].parents] == ["0", "1"]
    assert t[ops[0].parents[0].source].kind == "linear" and t[ops[0].parents[1].source].kind == "input"
    # each output reads a different subset: undeclared, outputs 1 and 2 fail the perturbation check
    assert not (report := tracer.validate(t))
    assert sorted(f["label"] for f in report.to_dict()["findings"]) == sorted(
        [ops[1].label, ops[2].label])
    declare_dependence(triple, {0: (0, 1), 1: (0,), 2: (1,)})
    t, _ = _trace_warned(model)
    assert (report := tracer.validate(t)), report.to_dict()["findings"]


# -- numpy / DLPack round trips ----------------------------------------------------------------
@pytest.mark.parametrize("reentry", ["from_numpy", "tensor", "dlpack"])
def test_round_trip_is_a_boundary_op_never_dropped(reentry):
    model = NumpyNet(reentry).eval()
    direct = model(X)
    t, warned = _trace_warned(model)
    assert torch.equal(t.output, direct)
    kind = "dlpack_roundtrip" if reentry == "dlpack" else "numpy_roundtrip"
    (trip,) = [op for op in t.ops if op.kind == kind]
    assert "constant" not in t.kind_counts(), "the re-entering tensor was dropped to an unknown constant"
    # its parent is the tensor that left torch (h.detach()), which came from the linear layer
    (edge,) = trip.parents
    chain = [t[edge.source]]
    while chain[-1].kind != "linear":
        chain.append(t[chain[-1].parents[0].source])
    assert [op.kind for op in chain] == ["contiguous", "detach", "linear"][-len(chain):] and len(chain) > 1
    assert t.children_of(trip.label) and t[t.children_of(trip.label)[0]].kind == "mul"
    assert t.provenance["foreign_kernels"] == {trip.label: {"boundary": kind, "name": trip.func}}
    assert len(warned) == 1 and kind.split("_")[0] in str(warned[0].message).lower()
    # its code ran outside torch: validation fails typed at exactly that op, everything else replays
    assert not (report := tracer.validate(t))
    (finding,) = report.to_dict()["findings"]
    assert finding["label"] == trip.label and errors.ForeignKernelNotReplayableError.code in finding["message"]


def test_value_reads_without_reentry_record_no_boundary():
    class Logs(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(8, 8)

        def forward(self, x):
            h = self.lin(x)
            self.seen = float(h.detach().numpy().sum())  # leaves, never comes back
            return h.relu()

    t, warned = _trace_warned(Logs().eval())
    assert not warned and "foreign_kernels" not in t.provenance and tracer.validate(t)


def test_doctor_foreign_kernels_row():
    from tests.models import tiny_gpt2
    from tracer.compat.doctor import doctor

    row = doctor(FunctionNet()).row("foreign.kernels")
    assert row.status == "pass" and any("test_foreign_kernels.py" in t for t in row.tests)
    assert f"{__name__}.PairKernel" in row.detail and "tlx::triple" in row.detail and "0 with declared" in row.detail
    declare_dependence(PairKernel, {1: (0, 1)})
    assert "1 with declared" in doctor(FunctionNet()).row("foreign.kernels").detail
    assert "foreign.kernels" not in doctor(tiny_gpt2()).keys()


class _ScriptedBlock(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(8, 8)
        self.register_buffer("scale", torch.full((8,), 0.5))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.tanh(self.lin(x)) * self.scale


class _HoldsScript(nn.Module):
    """A model with a TorchScript child, scripted or traced, between two recorded ops."""

    def __init__(self, traced: bool = False) -> None:
        super().__init__()
        block = _ScriptedBlock().eval()
        self.block = torch.jit.trace(block, (X,)) if traced else torch.jit.script(block)
        self.head = nn.Linear(8, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.block(x.relu()))


@pytest.mark.parametrize("traced", [False, True], ids=["script", "trace"])
def test_a_torchscript_child_is_one_boundary_op_reading_its_parameters(traced):
    torch.manual_seed(0)
    model = _HoldsScript(traced).eval()
    direct = model(X)
    own = [m.__dict__.get("forward") for m in model.modules()]  # a script module holds its ScriptMethod there
    t, warned = _trace_warned(model)
    assert torch.equal(t.output, direct)
    (op,) = [op for op in t.ops if op.kind == "script_module"]  # nothing inside TorchScript is seen, nothing dropped
    assert op.func.endswith("_ScriptedBlock") and op.module == "block"
    assert [t[e.source].kind for e in op.parents] == ["relu"]
    assert set(op.params) == {"block.lin.weight", "block.lin.bias", "block.scale"}
    assert [e.source for e in t[next(o.label for o in t.ops if o.kind == "linear")].parents] == [op.label]
    assert t.modules["block"].calls[0].outputs == (op.label,)
    assert [str(w.message).count("TorchScript module") for w in warned] == [1]
    assert t.provenance["foreign_kernels"][op.label]["boundary"] == "script_module"
    assert torch.equal(t.values[op.label], model.block(t.values[op.parents[0].source]))
    assert tracer.validate(t).passed  # replayed by calling the module again
    assert [m.__dict__.get("forward") for m in model.modules()] == own


def test_a_torchscript_child_replays_offline_only_when_allowed(tmp_path):
    torch.manual_seed(0)
    model = _HoldsScript().eval()
    t, _ = _trace_warned(model)
    loaded = tracer.load(t.save(tmp_path / "t"))
    refused = tracer.validate(loaded, params=model)
    assert not refused.passed and [f.check for f in refused.findings] == ["not_replayable_offline"]
    assert "offline_callables" in refused.findings[0].message
    with tracer.offline_callables(model.block):
        assert tracer.validate(loaded, params=model).passed


def test_a_scripted_model_is_one_boundary_op():
    torch.manual_seed(0)
    scripted = torch.jit.script(_ScriptedBlock().eval())
    t, warned = _trace_warned(scripted)
    assert [op.kind for op in t.ops] == ["input", "script_module", "output"] and len(warned) == 1
    assert torch.equal(t.output, scripted(X)) and tracer.validate(t).passed


def test_doctor_names_a_torchscript_child():
    from tracer.compat.doctor import doctor

    row = doctor(_HoldsScript()).row("foreign.kernels")
    assert "__torch__.tests.tracer.test_foreign_kernels._ScriptedBlock" in row.detail
