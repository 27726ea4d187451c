"""Admission of structure-only capture: what is admitted, every typed refusal, and that refusals change nothing."""
from __future__ import annotations

import pytest
import torch
from torch import nn

import tracer
from tests.models import tiny_gpt2, tiny_llama
from tests.state import assert_unchanged, snapshot
from tracer import errors
from tracer.errors import TracerError

SO = tracer.CaptureOptions(structure_only=True)


def meta_twin(real: nn.Module) -> nn.Module:
    with torch.device("meta"):
        twin = type(real)(real.config)
    return twin.eval()


def meta_ids(shape=(1, 8)) -> torch.Tensor:
    return torch.zeros(shape, dtype=torch.long, device="meta")


def refuse(model, args, kwargs=None, capture=SO) -> TracerError:
    before = snapshot(model)
    with pytest.raises(TracerError) as info:
        tracer.trace(model, args, kwargs, capture=capture)
    assert_unchanged(before, snapshot(model))  # a refusal changes no model or torch state
    err = info.value
    assert err.code and err.remedy, "every refusal has a stable code and a remedy"
    return err


class Branchy(nn.Module):
    """A small model whose forward does what the test names (value reads, real tensors)."""

    def __init__(self, what: str) -> None:
        super().__init__()
        self.what = what
        self.lin = nn.Linear(4, 4)

    def forward(self, x):
        y = self.lin(x)
        if self.what == "item":
            scale = y.sum().item()  # value read
            return y * scale
        if self.what == "bool":
            if y.sum() > 0:  # bool(tensor)
                return y
            return -y
        if self.what == "nonzero":
            return y[y.nonzero(as_tuple=True)]  # data-dependent shape
        if self.what == "cpu_literal":
            return y + torch.ones(4, device="cpu")  # REAL_TENSOR_LINE
        return y


def meta_branchy(what: str) -> nn.Module:
    with torch.device("meta"):
        return Branchy(what).eval()


# -- admitted ----------------------------------------------------------------------------
def test_meta_llama_is_admitted_and_holds_no_values():
    t = tracer.trace(meta_twin(tiny_llama()), (meta_ids(),), capture=SO)
    assert t.structure_only and t.values == {} and t.ladder_state == "HYPOTHESIS"
    assert t.provenance["admission"]["mode"] == "structure_only"
    assert t.provenance["admission"]["substrate"] == "meta"
    assert all(op.out is None or op.out.device == "meta" for op in t.ops)
    assert all(p.device == "meta" for p in t.params.values())
    assert not t.envelope.values_available and "HYPOTHESIS" in repr(t)


def test_plain_module_is_admitted():
    t = tracer.trace(meta_branchy("plain"), (torch.empty(2, 4, device="meta"),), capture=SO)
    assert [op.kind for op in t.ops] == ["input", "linear", "output"]
    assert t["linear_1"].out.shape == (2, 4) and t["linear_1"].params == ("lin.weight", "lin.bias")


# -- substrate refusals -----------------------------------------------------------------------
def test_meta_state_without_flag_refuses():
    err = refuse(meta_twin(tiny_gpt2()), (meta_ids(),), capture=tracer.CaptureOptions())
    assert isinstance(err, errors.MetaStateWithoutFlagError)
    assert err.code == "meta_state_without_structure_only" and "structure_only=True" in err.remedy


def test_flag_with_real_state_refuses_and_explains_config_construction():
    real = tiny_gpt2()
    err = refuse(real, (torch.zeros(1, 8, dtype=torch.long),))
    assert isinstance(err, errors.RealStateWithStructureOnlyError)
    assert err.code == "structure_only_on_real_state"
    assert "from_config" in err.remedy and "torch.device('meta')" in err.remedy
    # real model, meta inputs: still a loaded model asked for a weights-free view
    err = refuse(real, (meta_ids(),))
    assert isinstance(err, errors.RealStateWithStructureOnlyError)


class _Holder:
    """An input object (as a transformers Cache is) with a real tensor inside."""

    def __init__(self, t: torch.Tensor) -> None:
        self.t = t


def test_meta_model_with_a_real_tensor_inside_an_input_object_is_mixed():
    # tensors directly in args/kwargs/lists/dicts enter with known values (tests/tracer/test_known_inputs.py);
    # one inside another object is not swapped, so the mix is refused, naming it
    err = refuse(meta_twin(tiny_gpt2()), (meta_ids(),), {"past": _Holder(torch.zeros(2))})
    assert isinstance(err, errors.MixedSubstrateError) and err.code == "mixed_substrate"
    assert err.findings["real_side"] == ["kwargs.past.t"]
    assert "transformer.wte.weight" in err.findings["meta_side"]


def test_mixed_model_state_names_both_sides():
    model = meta_twin(tiny_gpt2())
    model.transformer.h[1].mlp.c_fc.weight = nn.Parameter(torch.zeros(32, 128))  # one real parameter
    err = refuse(model, (meta_ids(),))
    assert isinstance(err, errors.MixedSubstrateError)
    assert err.findings["real_side"] == ["transformer.h.1.mlp.c_fc.weight"]
    assert err.findings["meta_side"][0] == "transformer.wte.weight"
    assert err.site == "transformer.h.1.mlp.c_fc.weight"


def test_partly_meta_model_without_offload_hooks_refuses():
    model = tiny_gpt2()
    model.transformer.wte.weight = nn.Parameter(torch.empty(100, 32, device="meta"))
    err = refuse(model, (torch.zeros(1, 8, dtype=torch.long),), capture=tracer.CaptureOptions())
    assert isinstance(err, errors.OffloadEvidenceMissingError)
    assert err.findings["meta_without_hook"] == ["transformer.wte.weight"]


def test_accelerate_offloaded_model_is_admitted_eagerly():
    from accelerate import cpu_offload

    model = tiny_gpt2()
    x = torch.randint(0, 100, (1, 8))
    expected = model(x).logits
    cpu_offload(model, execution_device=torch.device("cpu"))
    assert next(model.parameters()).is_meta
    t = tracer.trace(model, (x,))
    assert t.provenance["admission"]["mode"] == "eager" and t.ladder_state == "OBSERVED"
    assert torch.allclose(t.output.logits, expected)


# -- refusals during the forward --------------------------------------------------------------
SO_SEES_META = tracer.CaptureOptions(structure_only=True, simulate_device=None)  # no simulated device


def test_real_tensor_created_mid_forward_points_at_the_users_line():
    # simulate_device=None: the model sees meta, so `device="cpu"` makes a real tensor (under the
    # default simulated cpu it goes to meta: tests/tracer/test_simulated_device.py)
    err = refuse(meta_branchy("cpu_literal"), (torch.empty(2, 4, device="meta"),),
                 capture=SO_SEES_META)
    assert isinstance(err, errors.RealTensorInStructureCaptureError) and err.code == "real_tensor_mid_forward"
    line = next(i for i, text in enumerate(open(__file__).read().splitlines(), 1) if "# REAL_TENSOR_LINE" in text)
    assert err.site.startswith(f"{__file__}:{line} in forward")
    # torch.ones(4) on cpu is a constant of the forward (admitted); adding it to a meta tensor is what fails
    assert err.findings["device"] == "cpu" and err.findings["made_by"] == "torch.ones"
    assert err.findings["call"] == "torch.Tensor.add" and "model's device" in err.message


class StrayAttribute(nn.Module):
    """A plain (unregistered) tensor attribute: it stays real when the model is built on meta."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(4, 4)

    def forward(self, x):
        return self.lin(x) * self.table  # STRAY_LINE


def test_real_tensor_entering_as_a_plain_attribute_refuses_at_its_line():
    with torch.device("meta"):
        model = StrayAttribute()
    model.table = torch.ones(4)
    # the model sees meta: a cpu tensor is foreign to it (under the default simulated cpu it enters as a
    # disclosed meta stand-in: tests/tracer/test_simulated_device.py)
    err = refuse(model, (torch.empty(2, 4, device="meta"),), capture=SO_SEES_META)
    assert isinstance(err, errors.RealTensorInStructureCaptureError) and err.code == "real_tensor_mid_forward"
    line = next(i for i, text in enumerate(open(__file__).read().splitlines(), 1) if "# STRAY_LINE" in text)
    assert err.site.startswith(f"{__file__}:{line} in forward")
    assert err.findings["device"] == "cpu" and "register_buffer" in err.remedy


class RepeatedThenStray(nn.Module):
    """Many plain meta calls of one function, then the same function on a stray real tensor."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(4, 4)

    def forward(self, x):
        y = self.lin(x)
        for _ in range(50):
            y = y * 1.5  # the guard's common case: meta tensors only, nothing known
        return y * self.table  # REPEATED_STRAY_LINE


def test_many_plain_meta_calls_of_a_function_skip_no_refusal():
    # the guard's fast exits are decided per call from its arguments, never remembered per function
    with torch.device("meta"):
        model = RepeatedThenStray()
    model.table = torch.ones(4)
    err = refuse(model, (torch.empty(2, 4, device="meta"),), capture=SO_SEES_META)
    assert isinstance(err, errors.RealTensorInStructureCaptureError) and err.code == "real_tensor_mid_forward"
    line = next(i for i, text in enumerate(open(__file__).read().splitlines(), 1) if "# REPEATED_STRAY_LINE" in text)
    assert err.site.startswith(f"{__file__}:{line} in forward")
    assert err.findings["call"] == "torch.Tensor.mul" and err.findings["shape"] == (4,)


class Windowed(nn.Module):
    """Makes constants from Python numbers inside forward, as transformers' sliding-window cache does."""

    def __init__(self, stray: bool = False) -> None:
        super().__init__()
        self.lin = nn.Linear(4, 4)
        self.stray = stray

    def forward(self, x):
        window = torch.tensor(3, dtype=torch.long)  # CONSTANT_LINE
        scale = torch.tensor([0.5, 2.0]).sum() + 1  # computed from constants alone: a constant too
        y = self.lin(x)[..., :3] * scale.to(x.device) + window.to(x.device)
        if self.stray:
            y = y * (window * self.table)  # a constant combined with data from outside the forward
        return y


def test_constants_from_python_numbers_are_admitted_and_recorded():
    torch.manual_seed(0)
    real = Windowed().eval()
    with torch.device("meta"):
        twin = Windowed().eval()
    x = torch.randn(2, 4)
    st = tracer.trace(twin, (x.to("meta"),), capture=SO)
    constants = st.provenance["admission"]["constants"]
    assert [(c["call"], c["shape"], c["device"]) for c in constants] == [
        ("torch.tensor", [], "cpu"), ("torch.tensor", [2], "cpu"), ("torch.Tensor.sum", [], "cpu"),
        ("torch.Tensor.add", [], "cpu")]
    line = next(i for i, text in enumerate(open(__file__).read().splitlines(), 1) if "# CONSTANT_LINE" in text)
    assert constants[0]["site"].startswith(f"{__file__}:{line} in forward")
    assert st.discharge_against(tracer.trace(real, (x,))).state == "CORROBORATED"


def test_constant_does_not_launder_a_stray_real_tensor():
    with torch.device("meta"):
        model = Windowed(stray=True).eval()
    model.table = torch.ones(3)
    err = refuse(model, (torch.empty(2, 4, device="meta"),), capture=SO_SEES_META)
    assert isinstance(err, errors.RealTensorInStructureCaptureError) and err.findings["shape"] == (3,)
    assert "register_buffer" in err.remedy


def test_large_tensor_from_python_data_still_refuses():
    class Big(nn.Module):
        def forward(self, x):
            return x + torch.ones(2100, 2000).sum()  # past the bound (MAX_KNOWN_NUMEL) of tensors made in the forward

    err = refuse(Big(), (torch.empty(2, 100, device="meta"),))
    assert isinstance(err, errors.RealTensorInStructureCaptureError) and err.findings["call"] == "torch.ones"
    assert "past the bound" in err.message


@pytest.mark.parametrize("what,call", [("item", "torch.Tensor.item"), ("bool", "torch.Tensor.__bool__"),
                                       ("nonzero", "torch.Tensor.nonzero")])
def test_value_dependent_branches_refuse(what, call):
    err = refuse(meta_branchy(what), (torch.empty(2, 4, device="meta"),))
    assert isinstance(err, errors.ValueDependentBranchError) and err.code == "value_dependent_branch"
    assert err.findings["call"] == call and err.site.startswith(__file__)


def test_packed_sequence_check_on_position_ids_is_answered_from_constants():
    # without a cache transformers checks position ids (torch.arange in the forward) for packed sequences
    t = tracer.trace(meta_twin(tiny_llama()), (meta_ids(),), {"use_cache": False}, capture=SO)
    reads = t.provenance["admission"]["resolved_reads"]
    assert reads and all(r["basis"] == "constants" for r in reads)
    assert any("masking_utils.py" in r["site"] for r in reads)


def test_sdpa_mask_read_gets_the_attention_backend_remedy():
    mask = torch.ones(1, 8, dtype=torch.long, device="meta")
    err = refuse(meta_twin(tiny_llama(attn="sdpa")), (meta_ids(),), {"attention_mask": mask})
    assert isinstance(err, errors.ValueDependentBranchError)
    assert err.findings["attn_implementation"] == "sdpa"
    assert "attn_implementation='eager'" in err.remedy


# -- tensor states -------------------------------------------------------------------------------
def _with_buffer(t: torch.Tensor) -> nn.Module:
    model = meta_branchy("plain")
    model.register_buffer("odd", t)
    return model


def test_fake_state_refuses():
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode():
        model = nn.Linear(4, 4)
    err = refuse(model, (torch.empty(2, 4, device="meta"),))
    assert isinstance(err, errors.UnsupportedTensorStateError) and err.findings["state"] == "fake"


def test_functional_state_refuses():
    err = refuse(_with_buffer(torch._to_functional_tensor(torch.empty(2, device="meta"))),
                 (torch.empty(2, 4, device="meta"),))
    assert isinstance(err, errors.UnsupportedTensorStateError) and err.findings["state"] == "functional"
    assert err.findings["tensor"] == "buffer:odd"


def test_quantized_state_refuses():
    q = torch.quantize_per_tensor(torch.randn(4), 0.1, 0, torch.qint8)
    err = refuse(_with_buffer(q), (torch.empty(2, 4, device="meta"),))
    assert isinstance(err, errors.UnsupportedTensorStateError) and err.findings["state"] == "quantized"


def test_bitsandbytes_state_refuses():
    import bitsandbytes as bnb

    model = bnb.nn.Linear4bit(4, 4)
    err = refuse(model, (torch.empty(2, 4, device="meta"),))
    assert isinstance(err, errors.UnsupportedTensorStateError)
    assert err.findings["state"].startswith("quantized (Params4bit")


def test_sparse_input_refuses():
    sparse = torch.sparse_coo_tensor(torch.tensor([[0, 1], [1, 2]]), torch.tensor([1.0, 2.0]), (2, 4))
    err = refuse(meta_branchy("plain"), (sparse,))
    assert isinstance(err, errors.UnsupportedTensorStateError) and err.findings["state"].startswith("sparse")


@pytest.mark.slow
def test_dtensor_state_refuses():
    import torch.distributed as dist
    from torch.distributed.device_mesh import DeviceMesh
    from torch.distributed.tensor import Replicate, distribute_tensor

    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    try:
        d = distribute_tensor(torch.randn(4), DeviceMesh("cpu", [0]), [Replicate()])
        err = refuse(_with_buffer(d), (torch.empty(2, 4, device="meta"),))
    finally:
        dist.destroy_process_group()
    assert isinstance(err, errors.DistributedCaptureUnsupportedError)
    assert err.code == "distributed_capture_unsupported" and err.findings["state"] == "DTensor"


# -- on-ramps ----------------------------------------------------------------------------------
def test_init_empty_weights_with_or_without_buffers_is_admitted():
    from accelerate import init_empty_weights

    real = tiny_llama()
    with init_empty_weights(include_buffers=True):
        model = type(real)(real.config).eval()
    t = tracer.trace(model, (meta_ids(),), capture=SO)
    assert t.structure_only and len(t) == len(tracer.trace(real, (torch.zeros(1, 8, dtype=torch.long),)))
    with init_empty_weights():  # buffers left real: they enter as meta copies with known values
        half = type(real)(real.config).eval()
    inv_freq = half.model.rotary_emb.inv_freq
    th = tracer.trace(half, (meta_ids(),), capture=SO)
    assert [op.label for op in th.ops] == [op.label for op in t.ops]
    assert [r["buffer"] for r in th.provenance["admission"]["known_buffers"]] == [
        "model.rotary_emb.inv_freq", "model.rotary_emb.original_inv_freq"]
    assert half.model.rotary_emb.inv_freq is inv_freq and not inv_freq.is_meta


@torch.library.custom_op("tlx_test::double_it", mutates_args=())
def _double_it(x: torch.Tensor) -> torch.Tensor:
    return x * 2  # a real kernel only: no fake (meta) implementation is registered


class _NoMetaKernel(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(4, 4)

    def forward(self, x):
        return torch.ops.tlx_test.double_it(self.lin(x))


class _ContainsCheck(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(4, 4)

    def forward(self, x):
        y = self.lin(x)
        return y if 3 in y else y + 1  # Tensor.__contains__ reads values


def test_a_kernel_without_a_meta_implementation_refuses_typed_and_restores_state():
    with torch.device("meta"):
        model = _NoMetaKernel()
    before = snapshot(model)
    with pytest.raises(errors.MetaKernelUnavailableError) as info:
        tracer.trace(model, (torch.zeros(2, 4, device="meta"),), capture=tracer.CaptureOptions(structure_only=True))
    assert info.value.code == "meta_kernel_unavailable" and "double_it" in info.value.message
    assert info.value.findings["module"] is not None and "forward" in (info.value.site or "")
    assert_unchanged(before, snapshot(model))


def test_membership_test_on_a_meta_tensor_is_a_value_read():
    with torch.device("meta"):
        model = _ContainsCheck()
    with pytest.raises(errors.ValueDependentBranchError) as info:
        tracer.trace(model, (torch.zeros(2, 4, device="meta"),), capture=tracer.CaptureOptions(structure_only=True))
    assert "__contains__" in info.value.message


def test_one_state_walk_lists_what_torch_lists():
    """Admission reads `params_and_buffers` (one walk, shared by trace's other admissions): torch's names and order,
    tied weights and a module reached twice counted once."""
    from tracer.capture.walk import named_modules, params_and_buffers

    model = tiny_gpt2()
    model.extra = model.transformer.h[0]  # the same block under a second address
    model.register_buffer("scale", torch.ones(1))
    params, buffers = params_and_buffers(model, modules=named_modules(model, remove_duplicate=False))
    assert [(n, id(t)) for n, t in params] == [(n, id(t)) for n, t in model.named_parameters()]
    assert [(n, id(t)) for n, t in buffers] == [(n, id(t)) for n, t in model.named_buffers()]
    assert (params, buffers) == params_and_buffers(model) and len(params) < len(dict(model.named_parameters(remove_duplicate=False)))
