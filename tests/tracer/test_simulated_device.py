"""Weights-free capture on a simulated device: the model sees it, tensors stay on meta, discharge checks it."""
from __future__ import annotations

import pytest
import torch
from torch import nn

import tracer
from tracer import errors
from tracer.claims.join import claim_table
from tests.models import tiny_qwen3_moe


class _DeviceAware(nn.Module):
    """Branches on the device as transformers' MoE does, and names the device in its calls."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(4, 4)

    def forward(self, x):
        h = self.lin(x)
        ids = h.argmax(-1)
        cast = ids.float() if ids.device.type in ("cpu", "mps") else ids.int()  # the moe.py branch
        bias = torch.zeros(4, device=x.device) + torch.ones(4, device="cpu" if x.is_cpu else x.device)
        flag = 1.0 if (h.get_device() == -1) == h.is_cpu else -1.0
        out = (h + bias).to(x.device)
        return (out.cpu() if x.is_cpu else out) * flag, cast.histc(bins=4, min=0, max=3)


def _pair(simulate: str | None):
    torch.manual_seed(0)
    real = _DeviceAware().eval()
    with torch.device("meta"):
        twin = _DeviceAware().eval()
    x = torch.randn(2, 4)
    st = tracer.trace(twin, (x.to("meta"),), capture=tracer.CaptureOptions(structure_only=True, simulate_device=simulate))
    return st, tracer.trace(real, (x,))


def test_the_default_simulates_the_cpu_and_a_cpu_twin_corroborates():
    st, rt = _pair("cpu")
    assert tracer.CaptureOptions().simulate_device == "cpu"
    assert any(op.kind == "float" for op in st.ops) and not any(op.kind == "int" for op in st.ops)
    assert all(op.out.device == "meta" for op in st.ops if op.out is not None)  # nothing real was made
    assert st.provenance["options"]["simulate_device"] == "cpu"
    assert st.provenance["admission"]["simulated_device"] == "cpu"
    assert st.envelope.twin["simulated_device"] == "cpu" and rt.provenance.twin["device"] == "cpu"
    assert st.discharge_against(rt).state == "CORROBORATED"
    assert torch._C._len_torch_function_stack() == 0


def test_a_simulated_cuda_takes_the_non_cpu_branch_and_a_cpu_twin_refuses_typed():
    st, rt = _pair("cuda")
    assert any(op.kind == "int" for op in st.ops) and not any(op.kind == "float" for op in st.ops)
    assert st.provenance["options"]["simulate_device"] == "cuda:0"
    with pytest.raises(errors.SimulatedDeviceMismatchError) as info:
        st.discharge_against(rt)
    err = info.value
    assert err.code == "simulated_device_mismatch" and "simulate_device='cpu'" in err.remedy
    assert err.findings["mismatches"] == [{"field": "device", "structure": "cuda:0", "real": "cpu"}]


def test_without_a_simulated_device_the_branch_is_refuted_with_the_remedy_named():
    st, rt = _pair(None)
    assert st.envelope.twin["simulated_device"] is None
    result = st.discharge_against(rt)
    assert result.state == "REFUTED" and "simulate_device=<the twin's device>" in str(result)


def test_the_simulated_device_survives_save_and_load(tmp_path):
    st, rt = _pair("cuda")
    st.save(tmp_path / "t")
    loaded = tracer.load(tmp_path / "t")
    assert loaded.envelope.twin["simulated_device"] == "cuda:0"
    with pytest.raises(errors.SimulatedDeviceMismatchError):
        loaded.discharge_against(rt)


@pytest.mark.parametrize("bad", ["meta", "warp9", 3.5])
def test_a_bad_simulated_device_refuses_typed(bad):
    with pytest.raises(errors.InvalidInputError) as info:
        tracer.CaptureOptions(structure_only=True, simulate_device=bad)
    assert info.value.code == "invalid_input" and "simulate_device" in info.value.site


def test_a_tiny_qwen3_moe_captures_weights_free_and_corroborates_on_the_cpu():
    ids = torch.randint(3, 64, (1, 8), generator=torch.Generator().manual_seed(1))
    rt = tracer.trace(tiny_qwen3_moe("cpu"), (), {"input_ids": ids})
    meta = tiny_qwen3_moe("meta")
    st = tracer.trace(meta, (), {"input_ids": ids.to("meta")}, capture=tracer.CaptureOptions(structure_only=True))
    kinds = [row[1] for row in claim_table(st)["ops"]]
    assert "histc" in kinds and "float" in kinds and "int" not in kinds  # moe.py's cpu branch
    assert st.discharge_against(rt).state == "CORROBORATED"


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the refusal where no cuda runtime exists")
def test_a_simulated_cuda_whose_runtime_is_queried_refuses_typed_and_leaves_no_trace_behind():
    meta = tiny_qwen3_moe("meta")
    hooks = (dict(meta._forward_pre_hooks), dict(meta._forward_hooks))
    with pytest.raises(errors.SimulatedDeviceRuntimeError) as info:
        tracer.trace(meta, (), {"input_ids": torch.zeros(1, 8, dtype=torch.long, device="meta")},
                     capture=tracer.CaptureOptions(structure_only=True, simulate_device="cuda"))
    err = info.value
    assert err.code == "simulated_device_runtime_missing" and "torch.cuda" in err.findings["call"]
    assert "transformers/integrations/moe.py" in err.site  # the model's line that asked the runtime
    assert (dict(meta._forward_pre_hooks), dict(meta._forward_hooks)) == hooks
    assert torch._C._len_torch_function_stack() == 0


class _MaskInVmap(nn.Module):
    """transformers' and_mask: `.to(result.device)` inside torch.vmap, where the capture records nothing."""

    def forward(self, x):
        def mask(q):
            result = q.new_ones((), dtype=torch.bool)
            return result & (q > 0).to(result.device)

        return x * torch.vmap(mask)(x)


def test_device_arguments_inside_vmap_go_to_meta_too():
    st = tracer.trace(_MaskInVmap(), (torch.empty(3, device="meta"),), capture=tracer.CaptureOptions(structure_only=True))
    assert st.output.device.type == "meta"


class _MaskedSoftmax(torch.autograd.Function):
    """transformers' XSoftmax (SEW-D, DeBERTa-v2): fills with a 0-dim cpu tensor inside its forward."""

    @staticmethod
    def forward(ctx, scores, mask):
        return torch.softmax(scores.masked_fill(~mask, torch.tensor(torch.finfo(scores.dtype).min)), -1)


class _UsesMaskedSoftmax(nn.Module):
    def forward(self, x):
        mask = torch.ones(x.shape, dtype=torch.bool, device=x.device)
        return _MaskedSoftmax.apply(x * 2, mask)


def test_a_cpu_scalar_beside_meta_tensors_inside_a_function_runs_on_meta_and_corroborates():
    x = torch.randn(2, 3)
    st = tracer.trace(_UsesMaskedSoftmax(), (x.to("meta"),), capture=tracer.CaptureOptions(structure_only=True))
    assert st.output.device.type == "meta"
    assert st.discharge_against(tracer.trace(_UsesMaskedSoftmax(), (x,))).state == "CORROBORATED"


class _Stray(nn.Module):
    """A plain (unregistered) cpu tensor attribute: a real cpu run reads it as it is."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(4, 4)

    def forward(self, x):
        return self.lin(x) * self.table  # STAND_IN_LINE


def test_a_real_tensor_on_the_simulated_device_enters_as_a_disclosed_meta_stand_in():
    torch.manual_seed(0)
    real = _Stray().eval()
    real.table = torch.arange(4.0)
    with torch.device("meta"):
        twin = _Stray().eval()
    twin.table = real.table  # the same real tensor (a global cache behaves alike)
    x = torch.randn(2, 4)
    st = tracer.trace(twin, (x.to("meta"),), capture=tracer.CaptureOptions(structure_only=True))
    (entry,) = st.provenance["admission"]["external_tensors"]
    assert entry["shape"] == [4] and entry["device"] == "cpu" and entry["call"] == "torch.Tensor.mul"
    assert "STAND_IN_LINE" in open(__file__).read().splitlines()[int(entry["site"].split(":")[1].split()[0]) - 1]
    # only the external tensor itself (a constant of the trace) is real: every op ran on meta
    assert {op.kind for op in st.ops if op.out is not None and op.out.device != "meta"} == {"constant"}
    assert st.discharge_against(tracer.trace(real, (x,))).state == "CORROBORATED"


class _MaskIndex(nn.Module):
    def forward(self, x, lengths):
        keep = torch.arange(x.shape[1], device=x.device)[None] < lengths[:, None]  # from an input's values
        return x[keep]  # USER_MASK_LINE


def test_a_boolean_mask_index_of_unknown_values_is_a_typed_value_read_at_the_users_line():
    x, lengths = torch.zeros(2, 5, device="meta"), torch.zeros(2, dtype=torch.long, device="meta")
    with pytest.raises(errors.ValueDependentBranchError) as info:
        tracer.trace(_MaskIndex(), (x, lengths), capture=tracer.CaptureOptions(structure_only=True))
    line = next(i for i, text in enumerate(open(__file__).read().splitlines(), 1) if "# USER_MASK_LINE" in text)
    assert info.value.site.startswith(f"{__file__}:{line} in forward") and "boolean mask" in info.value.message
    assert info.value.remedy


class _DeviceBranch(torch.autograd.Function):
    """An autograd Function whose forward branches on the device (its body runs unrecorded)."""

    @staticmethod
    def forward(ctx, x):
        return x * 2 if x.is_cuda and x.device.type == "cuda" and x.get_device() == 0 else x * 3


class _UsesDeviceBranch(nn.Module):
    def forward(self, x):
        return _DeviceBranch.apply(x + 1)


@pytest.mark.parametrize("witness", [False, True])
def test_device_reads_inside_a_function_and_beside_a_witness_see_the_simulated_device(witness):
    """The capture's own mode answers the reads (one mode); beside a witness census a second mode does."""
    seen: list[bool] = []
    original = _DeviceBranch.forward

    def forward(ctx, x):
        seen.append(x.is_cuda)
        return original(ctx, x)

    _DeviceBranch.forward = staticmethod(forward)
    try:
        for simulate, expected in (("cuda", True), ("cpu", False)):
            seen.clear()
            st = tracer.trace(_UsesDeviceBranch(), (torch.empty(2, 3, device="meta"),),
                              capture=tracer.CaptureOptions(structure_only=True, simulate_device=simulate, witness=witness))
            assert seen == [expected] and st.output.device.type == "meta"
            assert torch._C._len_torch_function_stack() == 0
    finally:
        _DeviceBranch.forward = original
