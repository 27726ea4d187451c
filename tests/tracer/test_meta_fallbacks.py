"""Meta fallbacks: a meta kernel stricter than the real one (torch._grouped_mm) gets a declared, disclosed rule."""
from __future__ import annotations

import pytest
import torch
from torch import nn

import tracer
from tracer import errors
from tracer.weights_free import meta_fallbacks

SO = tracer.CaptureOptions(structure_only=True)
K, N, G = 8, 12, 3


def _operands(case: str, dtype: torch.dtype) -> tuple[tuple, dict]:
    """Real CPU operands for each layout _grouped_mm documents (2d/3d with offsets, 3d/3d without)."""
    gen = torch.Generator().manual_seed(0)
    offs = torch.tensor([3, 7, 10], dtype=torch.int32)
    shapes = {"2d-3d": ((10, K), (G, K, N), offs), "3d-3d": ((G, 4, K), (G, K, N), None),
              "2d-2d": ((4, 12), (12, N), offs), "3d-2d": ((G, 4, K), (K, 12), offs)}
    a, b, o = shapes[case]
    if dtype == torch.float16:  # 16-byte aligned rows at 2 bytes an element
        a, b = (tuple(16 if d == 12 else d for d in a), tuple(16 if d == 12 else d for d in b))
    kwargs = {"offs": o} if o is not None else {}
    return (torch.randn(*a, generator=gen).to(dtype), torch.randn(*b, generator=gen).to(dtype)), kwargs


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
@pytest.mark.parametrize("case", ["2d-3d", "3d-3d", "2d-2d", "3d-2d"])
def test_grouped_mm_rule_gives_what_the_cpu_kernel_gives(case, dtype):
    (a, b), kwargs = _operands(case, dtype)
    real = torch._grouped_mm(a, b, **kwargs)
    meta_args = (a.to("meta"), b.to("meta"))
    meta_kwargs = {k: v.to("meta") for k, v in kwargs.items()}
    with pytest.raises(RuntimeError, match="BF16"):  # the meta kernel itself refuses these dtypes
        torch._grouped_mm(*meta_args, **meta_kwargs)
    out, rule = meta_fallbacks.fallback_output("torch._grouped_mm", meta_args, meta_kwargs)
    assert out.is_meta and out.shape == real.shape and out.dtype == real.dtype
    assert "bfloat16" in rule and "mat_a" in rule


def test_grouped_mm_rule_declines_what_the_cpu_kernel_refuses():
    (a, b), kwargs = _operands("2d-3d", torch.float32)
    with pytest.raises(RuntimeError, match="16 bytes"):
        torch._grouped_mm(a.half(), b.half()[..., :6], **kwargs)  # rows of 12 bytes
    with pytest.raises(RuntimeError):
        torch._grouped_mm(a, b.double(), **kwargs)
    offs = kwargs["offs"].to("meta")
    a, b = a.to("meta"), b.to("meta")
    assert meta_fallbacks.fallback_output("torch._grouped_mm", (a, b.double()), {"offs": offs}) is None  # mixed dtypes
    assert meta_fallbacks.fallback_output("torch._grouped_mm", (a.double(), b.double()), {"offs": offs}) is None
    assert meta_fallbacks.fallback_output("torch._grouped_mm", (a, b), {"offs": offs,
                                                                        "out_dtype": torch.float16}) is None
    assert meta_fallbacks.fallback_output("torch._grouped_mm", (a, b.half()[..., :6]), {"offs": offs}) is None
    assert meta_fallbacks.fallback_output("torch.nn.functional.linear", (a, b), {}) is None  # no rule


class _Experts(nn.Module):
    """Tokens routed to experts by fixed offsets, one grouped matmul (transformers' grouped_mm experts, reduced)."""

    def __init__(self) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.randn(G, K, N))
        self.register_buffer("offs", torch.tensor([3, 7, 10], dtype=torch.int32))

    def forward(self, x):
        return torch._grouped_mm(x * 2, self.weight, offs=self.offs).relu()


def test_structure_only_capture_records_the_op_discloses_the_rule_and_discharges_corroborated():
    torch.manual_seed(0)
    real = _Experts().eval()
    with torch.device("meta"):
        twin = _Experts().eval()
    x = torch.randn(10, K)
    st = tracer.trace(twin, (x.to("meta"),), capture=SO)
    rt = tracer.trace(real, (x,))
    op = next(op for op in st.ops if op.func == "torch._grouped_mm")
    assert op.out.shape == (10, N) and op.out.dtype == "float32" and op.params == ("weight", "offs")
    [entry] = st.provenance["admission"]["meta_fallbacks"]
    assert entry["call"] == "torch._grouped_mm" and st.ops[entry["op_index"]] is op
    assert entry["shape"] == [10, N] and entry["dtype"] == "float32" and "forward" in entry["site"]
    assert st.discharge_against(rt).state == "CORROBORATED"


class _NoRule(nn.Module):
    def forward(self, x):
        w = torch.zeros(G, K, N, dtype=torch.float64, device=x.device)  # the CPU kernel refuses mixed dtypes too
        return torch._grouped_mm(x, w, offs=torch.zeros(G, dtype=torch.int32, device=x.device))


def test_a_call_outside_the_rule_keeps_the_typed_refusal():
    with pytest.raises(errors.MetaKernelUnavailableError) as info:
        tracer.trace(_NoRule(), (torch.zeros(10, K, device="meta"),), capture=SO)
    assert "_grouped_mm" in info.value.message and "BF16" in info.value.message


class _TensorSize(nn.Module):
    def forward(self, x, mask):
        h = mask.sum(dim=-1)[0, 0]  # a size taken from the mask's values (as ViLT does)
        return nn.functional.interpolate(x, size=(h, h))


def test_a_size_given_as_tensors_is_a_value_read_not_a_missing_kernel():
    with pytest.raises(errors.ValueDependentBranchError) as info:
        tracer.trace(_TensorSize(), (torch.zeros(1, 1, 4, 4, device="meta"), torch.ones(1, 1, 4, dtype=torch.long, device="meta")),
                     capture=SO)
    assert info.value.code == "value_dependent_branch" and "interpolate" in info.value.message


def test_tiny_mixtral_on_meta_agrees_with_its_real_capture_except_at_the_device_branch():
    """Every grouped_mm row (shape from the rule) matches the real capture; only transformers' branches on
    the device type (a histc's input cast to float on cpu, to int elsewhere) differ, and discharge names them."""
    from tests.tracer.test_moe import IDS, tiny_moe
    from tracer.claims.join import claim_table

    real = tiny_moe("mixtral", "eager")
    with torch.device("meta"):
        twin = type(real)(real.config).eval()
    # the model sees meta (simulate_device=None): the branches take their non-cpu path
    st = tracer.trace(twin, (IDS.to("meta"),), capture=tracer.CaptureOptions(structure_only=True, simulate_device=None))
    rt = tracer.trace(real, (IDS,))
    fallbacks = st.provenance["admission"]["meta_fallbacks"]
    assert len(fallbacks) == 4 and {f["call"] for f in fallbacks} == {"torch._grouped_mm"}  # 2 layers x 2 matmuls
    claimed, observed = claim_table(st)["ops"], claim_table(rt)["ops"]
    assert len(claimed) == len(observed)
    differing = [i for i, (a, b) in enumerate(zip(claimed, observed)) if a[1:4] + a[5:8] != b[1:4] + b[5:8]]
    assert differing and not set(differing) & {f["op_index"] for f in fallbacks}
    assert {str(st.ops[i].source) for i in differing} == {str(rt.ops[i].source) for i in differing}
    # the experts' histc and the router loss's histc (output_router_logits) both cast by device type
    assert {(st.ops[i].kind, rt.ops[i].kind) for i in differing} == {("int", "float"), ("to", "to"), ("histc", "histc")}
    assert all(st.ops[i].kind == "histc" or st.ops[i + 1].kind == "histc" for i in differing)
    result = st.discharge_against(rt)
    assert result.state == "REFUTED" and result.contradiction["position"] == differing[0]
    assert "one line took a different path" in str(result)
