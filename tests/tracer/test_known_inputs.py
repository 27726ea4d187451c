"""Real inputs to a structure-only capture: they enter as meta tensors whose values are known
(tracer/weights_free/known_inputs.py). Reads of input values are answered and disclosed with basis
"inputs"; reads that depend on weights still refuse; the caller's tensors are never changed."""
from __future__ import annotations

import pytest
import torch
import transformers
from torch import nn

import tracer
from tracer import errors

SO = tracer.CaptureOptions(structure_only=True)


def _gpt2_config():
    return transformers.GPT2Config(n_layer=2, n_embd=32, n_head=2, vocab_size=100, n_positions=32,
                                   bos_token_id=0, eos_token_id=0)


def test_a_padded_mask_given_with_values_is_read_disclosed_and_discharges_corroborated():
    with torch.device("meta"):
        meta = transformers.GPT2Model(_gpt2_config()).eval()  # sdpa reads the mask's values
    ids = torch.randint(0, 100, (1, 8))
    mask = torch.ones(1, 8, dtype=torch.long)
    mask[0, :2] = 0
    structure = tracer.trace(meta, (), {"input_ids": ids, "attention_mask": mask}, capture=SO)
    admission = structure.provenance["admission"]
    assert [r["input"] for r in admission["known_inputs"]] == ["kwargs.input_ids", "kwargs.attention_mask"]
    assert all(r["values_known"] and r["device"] == "cpu" for r in admission["known_inputs"])
    reads = admission["resolved_reads"]
    assert reads and {r["basis"] for r in reads} == {"inputs"}
    assert "known" in admission["reason"]
    assert structure.envelope.ladder_state == "HYPOTHESIS"
    real = tracer.trace(transformers.GPT2Model(_gpt2_config()).eval(), (), {"input_ids": ids, "attention_mask": mask})
    assert structure.discharge_against(real).state == "CORROBORATED"


class _SplitByCounts(nn.Module):
    """A vision tower's shape: sizes read from an input (`grid.tolist()`), weights applied per piece."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(4, 4)

    def forward(self, x, counts):
        pieces = torch.split(self.lin(x), counts.tolist())
        return torch.stack([p.mean(0) for p in pieces])


class _ReadsWeights(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(4, 4)

    def forward(self, x):
        return self.lin(x) if self.lin(x).sum() > 0 else -x  # depends on weights: unknown on meta


class _InPlace(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(4, 4)

    def forward(self, x, counts):
        counts.add_(1)  # written in place: the forward's copy, never the caller's tensor
        return self.lin(x)[: int(counts.sum())]


def _meta(cls):
    with torch.device("meta"):
        return cls().eval()


def test_sizes_read_from_an_input_fix_the_structure_as_the_real_run_does():
    counts = torch.tensor([2, 3, 1])
    x = torch.randn(6, 4)
    structure = tracer.trace(_meta(_SplitByCounts), (x, counts), capture=SO)
    [read] = structure.provenance["admission"]["resolved_reads"]
    assert read["call"] == "torch.Tensor.tolist" and read["answer"] == [2, 3, 1] and read["basis"] == "inputs"
    real = tracer.trace(_SplitByCounts().eval(), (x, counts))
    assert structure.discharge_against(real).state == "CORROBORATED"
    assert [list(o.out.shape) for o in structure.ops if o.kind == "mean"] == [[4], [4], [4]]


def test_a_read_that_depends_on_weights_still_refuses():
    with pytest.raises(errors.ValueDependentBranchError) as info:
        tracer.trace(_meta(_ReadsWeights), (torch.randn(2, 4),), capture=SO)
    assert info.value.code == "value_dependent_branch"


def test_an_in_place_write_of_an_input_changes_the_known_copy_never_the_callers_tensor():
    counts, x = torch.tensor([1, 1]), torch.randn(6, 4)
    structure = tracer.trace(_meta(_InPlace), (x, counts), capture=SO)
    [read] = structure.provenance["admission"]["resolved_reads"]
    assert read["answer"] == 4 and read["basis"] == "inputs"  # (1 + 1) * 2: the write was followed
    assert counts.tolist() == [1, 1] and not x.is_meta
    real = tracer.trace(_InPlace().eval(), (x, counts.clone()))
    assert structure.discharge_against(real).state == "CORROBORATED"


class _KernelReads(nn.Module):
    """Kernels that read size or index values on meta: arange of a 0-dim size, a boolean mask index, a pad
    sized by a tensor, each fed from an input given with values."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(4, 4)

    def forward(self, x, grid, keep):
        h = self.lin(x)
        positions = torch.arange(grid[0] * grid[1])  # a size read from a 0-dim tensor
        kept = h[keep]  # h's values unknown (weights); only its shape and the known mask matter
        return kept.sum(0) + positions.float().sum(), kept


def test_kernels_that_read_known_sizes_or_masks_are_answered_and_the_output_shape_is_the_real_one():
    x, grid = torch.randn(5, 4), torch.tensor([2, 3])
    keep = torch.tensor([True, False, True, True, False])
    structure = tracer.trace(_meta(_KernelReads), (x, grid, keep), capture=SO)
    reads = {r["call"]: r for r in structure.provenance["admission"]["resolved_reads"]}
    assert reads["torch.arange"]["basis"] == "inputs"
    assert reads["torch.Tensor.__getitem__"]["answer"] == {"shape_from": "known arguments"}
    real = tracer.trace(_KernelReads().eval(), (x, grid, keep))
    assert structure.discharge_against(real).state == "CORROBORATED"
    assert [list(o.out.shape) for o in structure.ops if o.kind == "getitem" and o.out.shape[-1:] == (4,)][-1] == [3, 4]


def test_a_mask_that_depends_on_weights_still_refuses_the_index():
    class Masked(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.lin = nn.Linear(4, 4)

        def forward(self, x):
            h = self.lin(x)
            return h[h > 0]  # the mask's values come from weights: unknown

    with pytest.raises(errors.ValueDependentBranchError):
        tracer.trace(_meta(Masked), (torch.randn(3, 4),), capture=SO)


class _ConstantMovedToTheInputsDevice(nn.Module):
    """Idefics3's vision tower: a default mask made on the CPU (no device given), then moved to the inputs' device."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(4, 4)

    def forward(self, x):
        mask = torch.ones(1, 3).to(dtype=torch.bool, device=x.device)
        return self.lin(x) if mask.all() else -self.lin(x)


def test_a_constant_moved_onto_the_simulated_device_keeps_its_known_value():
    capture = tracer.CaptureOptions(structure_only=True, simulate_device="cpu")  # x.device reads as the CPU
    structure = tracer.trace(_meta(_ConstantMovedToTheInputsDevice), (torch.empty(2, 4, device="meta"),), capture=capture)
    [read] = structure.provenance["admission"]["resolved_reads"]
    assert read["call"] == "torch.Tensor.__bool__" and read["answer"] is True and read["basis"] == "constants"


class _TrimmedByABuffer(nn.Module):
    """A codec's trim: slice bounds computed from a buffer made from the config (`nn.Buffer(k - s)`)."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(4, 4)
        self.register_buffer("trim", torch.tensor(2), persistent=False)

    def forward(self, x):
        h = self.lin(x)
        end = h.shape[0] - self.trim  # a 0-dim tensor
        return h[self.trim // 2:end]


def test_slice_bounds_from_a_known_buffer_fix_the_slice_on_meta():
    accelerate = pytest.importorskip("accelerate")
    with accelerate.init_empty_weights():  # parameters on meta, the buffer real (its value known to the capture)
        meta = _TrimmedByABuffer().eval()
    x = torch.randn(6, 4)
    structure = tracer.trace(meta, (x,), capture=SO)
    assert [r["basis"] for r in structure.provenance["admission"]["resolved_reads"]] == ["buffers"]
    assert [3, 4] in [list(op.out.shape) for op in structure.ops if op.kind == "getitem"]  # rows 1:4 of 6
    real = tracer.trace(_TrimmedByABuffer().eval(), (x,))
    assert structure.discharge_against(real).state == "CORROBORATED"
