"""Zero untyped on the PyTorch surface (issue #35 deliver 3): each former escape, and its class.

Sparse layouts of any size, fake and functional tensors in eager, torch.ao quantized state, the
doctor on classes whose module is gone, the remedy a refusal prints, and the numpy admission row.
"""
from __future__ import annotations

import types
import warnings

import numpy as np
import pytest
import torch
from torch import nn

import tracer
from tracer.capture.call_template import tensor_value
from tracer.errors import MixedSubstrateError, TracerError


class SparseWeight(nn.Module):
    def __init__(self, weight: torch.Tensor, as_param: bool) -> None:
        super().__init__()
        if as_param:
            self.w = nn.Parameter(weight, requires_grad=False)
        else:
            self.register_buffer("w", weight)

    def forward(self, x):
        if self.w.layout == torch.sparse_coo:
            return torch.sparse.mm(self.w, x.t())
        return self.w @ x.t()


def _layouts(n: int) -> dict[str, torch.Tensor]:
    eye = torch.eye(n)
    return {"coo": eye.to_sparse(), "csr": eye.to_sparse_csr(), "csc": eye.to_sparse_csc(),
            "bsr": eye.to_sparse_bsr((4, 4))}


@pytest.mark.parametrize("n", [8, 256])
@pytest.mark.parametrize("layout", ["coo", "csr", "csc", "bsr"])
@pytest.mark.parametrize("as_param", [False, True])
def test_a_sparse_weight_of_any_layout_and_size_is_captured_and_replays(n, layout, as_param):
    weight = _layouts(n)[layout]
    x = torch.randn(2, n)
    model = SparseWeight(weight, as_param)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        t = tracer.trace(model, (x,))
        structure = tracer.trace(model, (x,), capture=tracer.CaptureOptions(save="none"))
    assert torch.equal(t.output, model(x))
    assert t.provenance.verified and "w" in {p for op in t.ops for p in op.params}
    assert [op.kind for op in structure.ops] == [op.kind for op in t.ops]
    report = tracer.validate(t)
    assert report.passed, report.findings


def test_tensor_value_never_inlines_a_non_dense_or_odd_dtype_tensor():
    for weight in _layouts(8).values():
        assert tensor_value(weight) is None
    assert tensor_value(torch.quantize_per_tensor(torch.randn(4), 0.1, 0, torch.qint8)) is None
    assert tensor_value(torch.zeros(2, dtype=torch.bfloat16)) is None
    assert tensor_value(torch.arange(3))["data"] == [0, 1, 2]


class QuantizedBuffer(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("q", torch.quantize_per_tensor(torch.randn(8), 0.1, 0, torch.qint8))

    def forward(self, x):
        return x + self.q.dequantize()


def test_a_torch_ao_quantized_buffer_is_captured():
    x = torch.randn(2, 8)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        t = tracer.trace(QuantizedBuffer(), (x,), capture=tracer.CaptureOptions(save="none"))
    assert [op.kind for op in t.ops] == ["input", "dequantize", "add", "output"]
    assert t.ops[1].params == ("q",)


def _static_quantized() -> nn.Module:
    static = nn.Sequential(torch.ao.quantization.QuantStub(), nn.Linear(8, 8), torch.ao.quantization.DeQuantStub())
    static.qconfig = torch.ao.quantization.get_default_qconfig("fbgemm")
    torch.ao.quantization.prepare(static, inplace=True)
    static(torch.randn(2, 8))
    return torch.ao.quantization.convert(static, inplace=True)


@pytest.mark.parametrize("save", ["all", "none"])
def test_torch_ao_packed_weights_are_a_disclosed_gap_never_exact(save):
    x = torch.randn(2, 8)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        dynamic = torch.ao.quantization.quantize_dynamic(nn.Sequential(nn.Linear(8, 8)), {nn.Linear})
        models = {"dynamic": dynamic, "static": _static_quantized()}
        traces = {k: tracer.trace(m, (x,), capture=tracer.CaptureOptions(save=save)) for k, m in models.items()}
    assert traces["dynamic"].provenance.unverified_ops == ("quantized_linear_dynamic_1",)
    assert traces["static"].provenance.unverified_ops == ("quantized_linear_1",)
    for t in traces.values():
        assert not t.provenance.verified
        assert any("packed quantized weights" in r for r in t.provenance.unverified_reasons)
        if save == "all":
            assert not tracer.validate(t).passed
    # the static model's QuantStub reads its scale and zero point into Python: disclosed by address
    assert any("0.scale" in w and "0.zero_point" in w for w in traces["static"].warnings)


def test_an_output_rebuilt_from_values_read_into_python_is_a_disclosed_gap():
    inner = nn.Linear(8, 4)

    class Rebuilt(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.inner = inner

        def forward(self, x):
            return torch.tensor(self.inner(x).tolist())

    class Constant(nn.Module):  # Python data, no value read: a constant of the code, not a gap
        def __init__(self) -> None:
            super().__init__()
            self.inner = inner

        def forward(self, x):
            return self.inner(x), torch.tensor([1.0, 2.0])

    x = torch.randn(3, 8)
    t = tracer.trace(Rebuilt(), (x,))
    assert not t.provenance.verified and t.provenance.unverified_ops == ("tensor_1",)
    assert not tracer.validate(t).passed
    assert tracer.trace(Constant(), (x,)).provenance.verified


def test_an_eager_capture_under_fake_tensor_mode_is_refused_typed():
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode():
        model = nn.Linear(4, 4)
        x = torch.randn(2, 4)
        with pytest.raises(TracerError) as err:
            tracer.trace(model, (x,))
    assert err.value.code == "unsupported_tensor_state" and err.value.findings["state"] == "fake"


def test_a_fake_input_to_a_real_model_is_refused_typed():
    from torch._subclasses.fake_tensor import FakeTensorMode

    x = FakeTensorMode().from_tensor(torch.randn(2, 4))
    with pytest.raises(TracerError) as err:
        tracer.trace(nn.Linear(4, 4), (x,))
    assert err.value.code == "unsupported_tensor_state" and err.value.site == "args.0"


def test_a_functional_tensor_is_refused_typed():
    from torch._subclasses.functional_tensor import FunctionalTensor, FunctionalTensorMode

    with FunctionalTensorMode():
        x = FunctionalTensor.to_functional(torch.randn(2, 4))
        with pytest.raises(TracerError) as err:
            tracer.trace(nn.Linear(4, 4), (x,))
    assert err.value.code == "unsupported_tensor_state"


def test_an_active_fake_mode_with_real_tensors_is_refused_typed():
    from torch._subclasses.fake_tensor import FakeTensorMode

    model, x = nn.Linear(4, 4), torch.randn(2, 4)
    with FakeTensorMode(allow_non_fake_inputs=True):
        with pytest.raises(TracerError) as err:
            tracer.trace(model, (x,))
    assert err.value.code == "unsupported_tensor_state" and err.value.findings["state"] == "FakeTensorMode"


def test_the_doctor_reads_a_class_whose_module_is_gone():
    gone = types.ModuleType("a_module_not_in_sys_modules")
    exec("from torch import nn\nclass Gone(nn.Module):\n    def __init__(self):\n        super().__init__()\n"
         "        self.lin = nn.Linear(4, 4)\n    def forward(self, x):\n        return self.lin(x)\n", gone.__dict__)
    report = tracer.doctor(gone.Gone(), (torch.randn(2, 4),))
    assert report.row("foreign.kernels") is not None
    assert not any("could not inspect" in r.detail for r in report.rows if r.key == "foreign.kernels")


def test_a_doctor_row_whose_detector_cannot_read_the_model_says_so():
    nameless = type("Nameless", (nn.Linear,), {"__module__": None})
    report = tracer.doctor(nameless(4, 4), (torch.randn(2, 4),))  # no untyped TypeError / AttributeError
    assert len(report.rows) > 10
    for row in report.rows:
        if "could not inspect" in row.detail:
            assert row.status == "not_tested" and row.applies


def test_a_refusal_prints_the_remedy_that_applies():
    err = MixedSubstrateError("split")
    assert MixedSubstrateError.default_remedy in str(err)
    err.remedy = "init_empty_weights(include_buffers=True)"
    assert "include_buffers=True" in str(err) and MixedSubstrateError.default_remedy not in str(err)
    assert "include_buffers=True" in err.args[0]


class _WithBuffer(nn.Module):
    """A branch on a buffer's value (answered from its known value) or on the weights' (refused)."""

    def __init__(self, branch_on_weights: bool = False) -> None:
        super().__init__()
        self.branch_on_weights = branch_on_weights
        self.lin = nn.Linear(4, 4)
        self.register_buffer("scale", torch.ones(4))

    def forward(self, x):
        y = self.lin(x) * self.scale
        return y if (y if self.branch_on_weights else self.scale).sum() > 0 else -y


def _empty_weights(**kwargs) -> nn.Module:
    accelerate = pytest.importorskip("accelerate")
    with accelerate.init_empty_weights():  # parameters on meta, the buffer left real
        return _WithBuffer(**kwargs)


def test_init_empty_weights_without_buffers_is_captured_with_the_buffers_values_known():
    # it refused mixed_substrate (remedy include_buffers=True); the real buffers now enter as meta copies whose
    # values are known (tracer/weights_free/known_buffers.py), and the model keeps its own buffers after
    model = _empty_weights()
    scale = model.scale
    t = tracer.trace(model, (torch.randn(2, 4, device="meta"),), capture=tracer.CaptureOptions(structure_only=True))
    admission = t.provenance["admission"]
    assert [r["buffer"] for r in admission["known_buffers"]] == ["scale"] and admission["known_buffers"][0]["values_known"]
    assert [r["basis"] for r in admission["resolved_reads"]] == ["buffers"]
    assert model.scale is scale and not scale.is_meta  # put back
    assert any("scale" in op.params for op in t.ops)  # the op that read it names the buffer


def test_a_refused_capture_puts_the_real_buffers_back():
    model = _empty_weights(branch_on_weights=True)
    scale = model.scale
    with pytest.raises(tracer.errors.ValueDependentBranchError):
        tracer.trace(model, (torch.randn(2, 4, device="meta"),), capture=tracer.CaptureOptions(structure_only=True))
    assert model.scale is scale and model._buffers["scale"] is scale


def _numpy_model(make):
    class FromNumpy(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.lin = nn.Linear(4, 4)

        def forward(self, x):
            return make(self.lin(x))

    with torch.device("meta"):
        return FromNumpy()


_META_X = (torch.empty(2, 4, device="meta"),)
_WF = tracer.CaptureOptions(structure_only=True)


def test_from_numpy_mid_forward_is_a_disclosed_stand_in_on_the_simulated_device():
    t = tracer.trace(_numpy_model(lambda y: y + torch.from_numpy(np.ones(4, dtype=np.float32))), _META_X, capture=_WF)
    external = t.provenance["admission"]["external_tensors"]
    assert len(external) == 1 and external[0]["shape"] == [4] and external[0]["device"] == "cpu"


def test_from_numpy_mid_forward_refuses_without_a_simulated_device():
    model = _numpy_model(lambda y: y + torch.from_numpy(np.ones(4, dtype=np.float32)))
    with pytest.raises(TracerError) as err:
        tracer.trace(model, _META_X, capture=tracer.CaptureOptions(structure_only=True, simulate_device=None))
    assert err.value.code == "real_tensor_mid_forward"


def test_a_value_read_of_a_numpy_stand_in_refuses():
    model = _numpy_model(lambda y: y * 2 if torch.from_numpy(np.ones(1, dtype=np.float32)).add(1).item() > 0 else y)
    with pytest.raises(TracerError) as err:
        tracer.trace(model, _META_X, capture=_WF)
    assert err.value.code == "value_dependent_branch"


@pytest.mark.parametrize("factory", [torch.tensor, torch.as_tensor])
def test_torch_tensor_of_a_numpy_array_mid_forward_refuses(factory):
    model = _numpy_model(lambda y: y + factory(np.ones(4, dtype=np.float32)))
    with pytest.raises(TracerError) as err:
        tracer.trace(model, _META_X, capture=_WF)
    assert err.value.code == "real_tensor_mid_forward"


def test_a_jagged_nested_input_to_a_weights_free_capture_is_named_nested():
    with torch.device("meta"):
        model = nn.Linear(8, 4)
    nt = torch.nested.nested_tensor([torch.randn(n, 8) for n in (2, 5)], layout=torch.jagged, device="meta")
    with pytest.raises(TracerError) as err:
        tracer.trace(model, (nt,), capture=_WF)
    assert err.value.code == "unsupported_tensor_state" and err.value.findings["state"].startswith("nested")


def test_a_script_module_is_named_alike_however_often_it_was_traced():
    from tracer.capture.boundaries import script_name

    lin = nn.Linear(2, 2)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        names = {script_name(torch.jit.trace(lin, torch.randn(1, 2))) for _ in range(3)}
    assert names == {"__torch__.torch.nn.modules.linear.Linear"}


class _WrapperTensor(torch.Tensor):
    """A `__torch_dispatch__` wrapper subclass: its own storage holds no data."""

    @staticmethod
    def __new__(cls, inner):
        return torch.Tensor._make_wrapper_subclass(cls, inner.shape, dtype=inner.dtype, device=inner.device)

    def __init__(self, inner):
        self.inner = inner

    @classmethod
    def __torch_dispatch__(cls, func, types, args=(), kwargs=None):
        unwrap = lambda a: a.inner if isinstance(a, _WrapperTensor) else a  # noqa: E731
        out = func(*[unwrap(a) for a in args], **{k: unwrap(v) for k, v in (kwargs or {}).items()})
        return torch.utils._pytree.tree_map(lambda o: cls(o) if isinstance(o, torch.Tensor) else o, out)


@pytest.mark.parametrize("make", [
    lambda: torch.nested.nested_tensor([torch.randn(n, 8) for n in (2, 5)], layout=torch.jagged),
    lambda: _WrapperTensor(torch.randn(3, 8)),
], ids=["jagged", "wrapper_subclass"])
def test_saving_values_with_no_dense_storage_refuses_typed_and_writes_nothing(make, tmp_path):
    t = tracer.trace(nn.Linear(8, 4), (make(),))
    with pytest.raises(TracerError) as err:
        t.save(tmp_path / "t")
    assert err.value.code == "trace_save_failed" and "cannot be stored" in str(err.value)
    assert not (tmp_path / "t").exists() or not any((tmp_path / "t").iterdir())


def test_a_saved_value_whose_storage_was_freed_is_dropped_not_read():
    # FSDP resizes an all-gathered parameter's storage to 0 after each layer; when a later write landed at
    # the freed address, the capture cloned the old value from freed memory (a segfault in CI, stop 43)
    from tracer.capture.session import _backed

    t = torch.arange(6.0).reshape(2, 3)
    view = t[1:]
    assert _backed(t) and _backed(view) and _backed(torch.empty(0))
    t.untyped_storage().resize_(0)
    assert not _backed(t) and not _backed(view)
