"""Weights-free capture answers value reads fixed by constants of the forward, discloses each, and refuses the rest.

A mask made with `torch.ones` from a shape, position ids from `torch.arange`: their values are in
the code, so a read of them (`if mask.all():`) is answered from a known value computed beside the
meta tensor, recorded in `provenance["admission"]["resolved_reads"]`, and the trace still
discharges CORROBORATED against the real capture. A read of anything computed from weights or
inputs refuses typed at the user's line, as before.
"""
from __future__ import annotations

import pytest
import torch
from torch import nn

import tracer
from tests.state import assert_unchanged, snapshot
from tracer import errors
from tracer.weights_free.constants import MAX_KNOWN_NUMEL

SO = tracer.CaptureOptions(structure_only=True)


def line_of(marker: str) -> int:
    return next(i for i, text in enumerate(open(__file__).read().splitlines(), 1) if marker in text)


class Reads(nn.Module):
    """One value read of the kind named, on a tensor made from shapes and Python numbers in the forward."""

    def __init__(self, what: str) -> None:
        super().__init__()
        self.what = what
        self.lin = nn.Linear(6, 6)

    def forward(self, x):
        y = self.lin(x)
        n = x.shape[1]
        if self.what == "bool":
            mask = torch.ones(x.shape[0], n, device=x.device)
            if mask.all():  # READ_bool
                y = y * 2
        elif self.what == "item":
            total = torch.arange(n, device=x.device).sum().item()  # READ_item
            y = y * total
        elif self.what == "tolist":
            sizes = torch.full((2,), n // 2, device=x.device, dtype=torch.long).tolist()  # READ_tolist
            y = torch.cat([part * (i + 1) for i, part in enumerate(y.split(sizes, dim=1))], dim=1)
        elif self.what == "contains":
            mask = torch.ones(x.shape[0], n, dtype=torch.long, device=x.device)
            if 0 in mask:  # READ_contains
                y = -y
        elif self.what == "nonzero":
            keep = torch.tensor([1, 0, 1, 1, 0, 1], device=x.device)
            y = y[:, keep.nonzero().squeeze(1)]  # READ_nonzero
        elif self.what == "repeat_interleave":
            repeats = torch.tensor([1, 2, 1, 0, 3, 1], device=x.device)
            y = y.repeat_interleave(repeats, dim=1)  # READ_repeat_interleave
        elif self.what == "unique":
            ids = torch.tensor([3, 1, 3, 2], device=x.device)
            y = y[:, : len(torch.unique(ids))]  # READ_unique
        elif self.what == "filled":
            m = torch.empty(3, device=x.device)
            m.fill_(2.0)
            if (m == 2).all():  # READ_filled
                y = y + 1
        elif self.what == "written":
            m = torch.zeros(4, device=x.device)
            m[1] = 3  # an in-place write of a constant keeps the value known
            m[2:] += torch.ones(2, device=x.device)
            if m.sum() == 5:  # READ_written
                y = y * 3
        return y


CALLS = {"bool": "torch.Tensor.__bool__", "item": "torch.Tensor.item", "tolist": "torch.Tensor.tolist",
         "contains": "torch.Tensor.__contains__", "nonzero": "torch.Tensor.nonzero",
         "repeat_interleave": "torch.Tensor.repeat_interleave", "unique": "torch.functional.unique",
         "filled": "torch.Tensor.__bool__", "written": "torch.Tensor.__bool__"}
ANSWERS = {"bool": True, "item": 15, "tolist": [3, 3], "contains": False, "filled": True, "written": True}
SHAPES = {"nonzero": [4, 1], "repeat_interleave": [2, 8], "unique": [3]}  # data-dependent output shapes


def twins(what: str) -> tuple[nn.Module, nn.Module]:
    torch.manual_seed(0)
    real = Reads(what).eval()
    with torch.device("meta"):
        meta = Reads(what).eval()
    return real, meta


@pytest.mark.parametrize("what", list(CALLS))
def test_read_of_a_constant_is_answered_disclosed_and_corroborated(what):
    real, meta = twins(what)
    x = torch.randn(2, 6)
    st = tracer.trace(meta, (x.to("meta"),), capture=SO)
    reads = st.provenance["admission"]["resolved_reads"]
    assert [r["call"] for r in reads] == [CALLS[what]], reads
    read = reads[0]
    assert read["basis"] == "constants"
    assert read["site"].startswith(f"{__file__}:{line_of(f'# READ_{what}')} in forward")
    observed = tracer.trace(real, (x,))
    assert st.output.shape == observed.output.shape
    if what in SHAPES:  # a data-dependent shape: the answer is the shape of the known result
        assert read["answer"]["shape"] == SHAPES[what]
    else:
        assert read["answer"] == ANSWERS[what]
    result = st.discharge_against(observed)
    assert st.ladder_state == "HYPOTHESIS" and result.state == "CORROBORATED", str(result)


def test_repeat_interleave_with_integer_repeats_is_not_a_read():
    class Rope(nn.Module):
        def forward(self, x):
            return torch.repeat_interleave(x, 2, dim=-1) + x.repeat_interleave(2, dim=-1)

    st = tracer.trace(Rope(), (torch.empty(2, 3, device="meta"),), capture=SO)
    assert st.provenance["admission"]["resolved_reads"] == []
    assert st.output.shape == (2, 6)


class Tainted(nn.Module):
    """A constant combined with (or overwritten by) a weights-derived value, then read."""

    def __init__(self, what: str) -> None:
        super().__init__()
        self.what = what
        self.lin = nn.Linear(4, 4)

    def forward(self, x):
        y = self.lin(x)
        mask = torch.ones(4, device=x.device)
        if self.what == "combined":
            mask = mask * y.sum()
        elif self.what == "inplace":
            mask.mul_(y.sum())
        elif self.what == "view":
            head = mask[:2]
            mask.mul_(y.sum())  # writes through to `head`
            mask = head
        elif self.what == "setitem":
            mask[1] = y[0, 0]
        elif self.what == "random":
            mask = torch.rand(4, device=x.device)
        elif self.what == "large":
            mask = torch.ones(MAX_KNOWN_NUMEL + 1, device=x.device)
        if mask.all():  # TAINTED_READ
            return y
        return -y


@pytest.mark.parametrize("what", ["combined", "inplace", "view", "setitem", "random", "large"])
def test_read_of_a_weights_derived_or_unknown_value_still_refuses_at_the_users_line(what):
    with torch.device("meta"):
        model = Tainted(what).eval()
    before = snapshot(model)
    with pytest.raises(errors.ValueDependentBranchError) as info:
        tracer.trace(model, (torch.empty(2, 4, device="meta"),), capture=SO)
    assert_unchanged(before, snapshot(model))
    err = info.value
    assert err.code == "value_dependent_branch" and err.remedy
    assert err.site.startswith(f"{__file__}:{line_of('# TAINTED_READ')} in forward")
    assert err.findings["call"] == "torch.Tensor.all"
    if what == "large":
        assert "dropped at the bound" in err.message


def test_random_tensor_on_cpu_is_admitted_as_random_and_never_read():
    class Noise(nn.Module):
        def __init__(self, read: bool) -> None:
            super().__init__()
            self.read = read

        def forward(self, x):
            noise = torch.randn(x.shape[0], 3).to(device=x.device)  # RANDOM_LINE
            if self.read and torch.randn(2).sum() > 0:  # RANDOM_READ
                return x
            return x[:, :3] + noise

    st = tracer.trace(Noise(False), (torch.empty(2, 4, device="meta"),), capture=SO)
    record = st.provenance["admission"]["constants"][0]
    assert record["call"] == "torch.randn" and record["values"] == "random" and record["device"] == "cpu"
    assert record["site"].startswith(f"{__file__}:{line_of('# RANDOM_LINE')} in forward")
    with pytest.raises(errors.ValueDependentBranchError) as info:
        tracer.trace(Noise(True), (torch.empty(2, 4, device="meta"),), capture=SO)
    assert info.value.site.startswith(f"{__file__}:{line_of('# RANDOM_READ')} in forward")


def test_cpu_arange_is_a_constant_and_its_reads_are_answered():
    class Blocks(nn.Module):
        def forward(self, x):
            pos = torch.arange(3 * 40, dtype=torch.int32)  # past the old 64-element cap; still a constant
            rel = pos.unsqueeze(0) - pos[40:80].unsqueeze(1)
            assert int(rel.max()) == 79
            return x + rel.to(x.device).sum()

    st = tracer.trace(Blocks(), (torch.empty(2, device="meta"),), capture=SO)
    constants = st.provenance["admission"]["constants"]
    assert constants[0]["call"] == "torch.arange" and constants[0]["shape"] == [120]
    assert all(c["values"] == "constant" for c in constants)
    reads = st.provenance["admission"]["resolved_reads"]
    assert [(r["call"], r["answer"]) for r in reads] == [("torch.Tensor.__int__", 79)]


def test_disclosure_survives_save_and_load(tmp_path):
    real, meta = twins("bool")
    st = tracer.trace(meta, (torch.empty(2, 6, device="meta"),), capture=SO)
    st.save(tmp_path / "t")
    loaded = tracer.load(tmp_path / "t")
    assert loaded.provenance["admission"]["resolved_reads"] == st.provenance["admission"]["resolved_reads"]
    assert loaded.ladder_state == "HYPOTHESIS"


def test_neutral_read_matches_only_the_registered_function_and_read():
    from tracer.weights_free.neutral_reads import neutral_read

    site = "/x/site-packages/transformers/modeling_utils.py:4701 in warn_if_padding_and_no_attention_mask"
    assert neutral_read("contains", site).answer is False
    assert neutral_read("bool", site) is None  # another read at the same place
    assert neutral_read("contains", site.replace("modeling_utils", "masking_utils")) is None
    assert neutral_read("contains", f"{__file__}:1 in warn_if_padding_and_no_attention_mask") is None
    assert neutral_read("contains", None) is None


# -- transformers ------------------------------------------------------------------------------
def _hf(model_type: str):
    from tests.zoo.hf import build, classes_of, make_inputs, tiny_config

    config = tiny_config(model_type)
    cls = classes_of(model_type)[0]
    real = build(cls, config)
    inputs = make_inputs(real, config)
    meta = build(cls, config, device="meta")
    return real, meta, inputs


def _hf_weights_free(model_type: str):
    real, meta, inputs = _hf(model_type)
    st = tracer.trace(meta, (), {k: v.to("meta") for k, v in inputs.items()}, capture=SO)
    torch.manual_seed(0)
    observed = tracer.trace(real, (), inputs)
    return st, observed


@pytest.mark.slow
def test_bart_mask_check_is_answered_from_constants_and_corroborated():
    st, observed = _hf_weights_free("bart")
    reads = st.provenance["admission"]["resolved_reads"]
    assert reads and {r["basis"] for r in reads} == {"constants"}
    assert any(r["call"] == "torch.Tensor.__bool__" and "masking_utils.py" in r["site"] for r in reads)
    assert st.provenance["admission"]["resolved_read_count"] == len(reads)
    result = st.discharge_against(observed)
    assert result.state == "CORROBORATED", str(result)


@pytest.mark.slow
def test_padding_warning_check_is_a_disclosed_neutral_read():
    st, observed = _hf_weights_free("roformer")
    neutral = [r for r in st.provenance["admission"]["resolved_reads"] if r["basis"].startswith("neutral")]
    assert [(r["call"], r["answer"]) for r in neutral] == [("torch.Tensor.__contains__", False)]
    assert "warn_if_padding_and_no_attention_mask" in neutral[0]["site"]
    assert st.discharge_against(observed).state == "CORROBORATED"


@pytest.mark.slow
def test_transformers_read_of_input_derived_value_still_refuses():
    _real, meta, inputs = _hf("xlm")  # sequence lengths are counted from the input ids
    with pytest.raises(errors.ValueDependentBranchError) as info:
        tracer.trace(meta, (), {k: v.to("meta") for k, v in inputs.items()}, capture=SO)
    assert info.value.findings["call"] == "torch.Tensor.item" and "modeling_xlm.py" in info.value.site


@pytest.mark.slow
def test_transformers_read_of_weights_derived_routing_still_refuses():
    _real, meta, inputs = _hf("jetmoe")  # expert sizes come from the router's weights
    with pytest.raises(errors.ValueDependentBranchError) as info:
        tracer.trace(meta, (), {k: v.to("meta") for k, v in inputs.items()}, capture=SO)
    assert info.value.findings["call"] == "torch.Tensor.tolist" and "modeling_jetmoe.py" in info.value.site
