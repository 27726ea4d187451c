"""[issue 11] Validation without false alarms: each class of former false alarm, on real models.

Piecewise-constant outputs, kernels that do not replay bit for bit, in-place buffer writes,
replays that cannot run, and the call template every op records.
"""
from __future__ import annotations

import json

import pytest
import torch
from torch import nn

import tracer
from tests.models import tiny_bert
from tracer.replay.validate import validate, validation_report


def _calls(t) -> int:
    return sum(1 for op in t.ops if op.kind not in ("input", "output", "constant"))


# -- piecewise-constant outputs ------------------------------------------------------------------
def _tiny_t5():
    from transformers import T5Config, T5Model

    torch.manual_seed(0)
    return T5Model(T5Config(d_model=64, d_ff=128, num_layers=2, num_heads=4, vocab_size=128, d_kv=16)).eval()


def test_t5_relative_position_buckets_validate():
    ids = torch.tensor([[5, 17, 3, 99, 42, 7, 1]])
    t = tracer.trace(_tiny_t5(), (), {"input_ids": ids, "decoder_input_ids": ids})
    report = validation_report(t)
    assert report.passed, report.to_text()
    # The bucket comparisons (lt) are proven by a perturbation that crosses their threshold.
    lt = [op.label for op in t.ops if op.kind == "lt"]
    assert lt and not any(label == lt[0] for label, _, _ in report.not_perturbable)
    # Whatever stays unproven is an integer or boolean output, disclosed with its reason, never a failure.
    for label, _position, why in report.not_perturbable:
        assert why.startswith("not perturbable:") and not t[label].out.dtype.startswith("float")
    assert report.edges_carrying + report.edges_excused + report.edges_not_perturbable == report.edges_checked


class _NonzeroMask(nn.Module):
    """`h != 0` where no element of h is zero: a noise perturbation cannot flip the mask."""

    def __init__(self) -> None:
        super().__init__()
        self.proj = nn.Linear(4, 4)

    def forward(self, x):
        h = self.proj(x).abs() + 1.0
        keep = h != 0
        return torch.where(keep, h, torch.zeros_like(h)), keep.all()


def test_comparison_mask_edges_are_proven_by_crossing_perturbations():
    t = tracer.trace(_NonzeroMask(), (torch.randn(3, 4),))
    report = validation_report(t)
    assert report.passed, report.to_text()
    ne = next(op for op in t.ops if op.kind == "ne")
    # A constant fill of zeros crosses `!= 0`: the edge is proven, not excused.
    assert not any(label == ne.label for label, _, _ in report.not_perturbable + report.excused)
    # The mask is all True, so where's other branch is never selected: disclosed, not a failure.
    where = next(op for op in t.ops if op.kind == "where")
    assert [(lab, pos) for lab, pos, _ in report.not_perturbable] == [(where.label, "2")]


def test_bert_with_padded_attention_mask_validates():
    ids = torch.tensor([[5, 17, 3, 99, 42, 7, 0, 0]])
    mask = torch.tensor([[1, 1, 1, 1, 1, 1, 0, 0]])
    t = tracer.trace(tiny_bert(), (ids,), {"attention_mask": mask})
    report = validation_report(t)
    assert report.passed, report.to_text()


class _PaddedAll(nn.Module):
    def forward(self, x):
        keep = (x > 0).long()  # a padding-style 0/1 mask with zeros in it
        return keep.all(), torch.argmax(x * 1000.0, dim=-1)


def test_all_over_a_padding_mask_and_argmax_never_fail_by_themselves():
    x = torch.tensor([[0.5, 5.0, -1.0], [9.0, -0.5, 0.2]])
    t = tracer.trace(_PaddedAll(), (x,))
    report = validation_report(t)
    assert report.passed, report.to_text()
    # Flipping bits of a 0/1 mask keeps a zero in it; a constant fill of ones proves the edge.
    assert report.edges_carrying == report.edges_checked


def test_a_float_edge_that_carries_no_data_still_fails():
    class DeadEdge(nn.Module):
        def forward(self, x):
            return torch.clamp(x, min=2.0, max=2.0) + x

    report = validation_report(tracer.trace(DeadEdge(), (torch.randn(3, 4),)))
    assert not report.passed and report.findings[0].check == "edge"


def test_an_equality_against_a_count_is_proven_with_the_compared_value():
    class AllPositive(nn.Module):  # transformers' fast "all" test: sum(mask) == numel
        def forward(self, x):
            keep = (x > 0).long()
            return keep.sum() == keep.numel(), keep

    x = torch.tensor([[0.5, -5.0, 1.0], [9.0, 0.5, 0.2]])
    report = validation_report(tracer.trace(AllPositive(), (x,)))
    assert report.passed and report.edges_carrying == report.edges_checked, report.to_text()


# -- kernels that do not replay bit for bit ---------------------------------------------------------
class _Recurrent(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lstm = nn.LSTM(8, 16, num_layers=2)
        self.gru = nn.GRU(16, 8, bidirectional=True)

    def forward(self, x):
        return self.gru(self.lstm(x)[0])[0]


def test_lstm_and_gru_replay_bit_exact_in_the_capture_grad_mode():
    torch.manual_seed(0)
    t = tracer.trace(_Recurrent(), (torch.randn(5, 2, 8),))
    report = validation_report(t)
    assert report.passed, report.to_text()
    assert report.ops_exact == _calls(t) and not report.tolerances  # exact, no tolerance needed


@torch.library.custom_op("tlx_validator::jitter", mutates_args=())
def _jitter(x: torch.Tensor) -> torch.Tensor:
    """A kernel whose result varies by +-1e-6 per element from call to call."""
    return x + 1e-6 * (torch.randint(0, 2, x.shape, dtype=x.dtype) * 2 - 1)


@_jitter.register_fake
def _(x):
    return torch.empty_like(x)


class _Jittery(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.proj = nn.Linear(16, 16)

    def forward(self, x):
        return self.proj(_jitter(x)).relu()


def test_a_kernel_that_varies_between_replays_is_held_to_its_disclosed_spread():
    torch.manual_seed(0)
    t = tracer.trace(_Jittery(), (torch.randn(8, 16),))
    report = validation_report(t)
    assert report.passed, report.to_text()
    (label, tol), = report.tolerances.items()
    assert t[label].kind == "tlx_validator_jitter" and report.ops_within_spread == 1
    assert 0 < tol["spread"] <= 2.1e-6 and tol["atol"] == 2 * tol["spread"] and "does not replay bit for bit" in tol["why"]
    assert report.to_dict()["tolerances"][label]["atol"] == tol["atol"]
    # Outside the spread is still a failure.
    t.values[label] = t.values[label] + 1e-3
    assert not validation_report(t).passed


@torch.library.custom_op("tlx_validator::unlisted_noise", mutates_args=())
def _unlisted_noise(x: torch.Tensor) -> torch.Tensor:
    """A random kernel the kernel table does not know: its replays differ far beyond rounding."""
    return x + 0.5 * torch.randn(x.shape, dtype=x.dtype)


@_unlisted_noise.register_fake
def _(x):
    return torch.empty_like(x)


def test_an_unlisted_random_kernel_is_compared_by_metadata_and_disclosed():
    class Noisy(nn.Module):
        def forward(self, x):
            return _unlisted_noise(x * 2) + 1

    torch.manual_seed(0)
    t = tracer.trace(Noisy(), (torch.randn(8, 16),))
    report = validation_report(t)
    label = next(op.label for op in t.ops if op.kind == "tlx_validator_unlisted_noise")
    # Seeded: the recorded draw sits within twice the spread of the replays' draws.
    assert report.passed, report.to_text()
    assert report.tolerances[label]["random"] is True and report.ops_nondeterministic == 1
    assert any(lab == label and "random" in why for lab, _, why in report.excused)


def test_attention_dropout_in_training_is_random_by_the_kernel_table():
    torch.manual_seed(0)
    m = nn.MultiheadAttention(16, 2, dropout=0.5, batch_first=True).train()
    x, y = torch.randn(2, 5, 16), torch.randn(2, 4, 16)
    t = tracer.trace(m, (x, y, y))
    report = validation_report(t)
    assert report.passed, report.to_text()
    assert report.ops_nondeterministic == 2 and not report.tolerances  # both outputs, by the table


# -- in-place writes to buffers ------------------------------------------------------------------------
def test_train_mode_batchnorm_replays_its_buffer_writes():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.BatchNorm1d(8)).train()
    t = tracer.trace(model, (torch.randn(6, 4),))
    add = next(op for op in t.ops if op.kind == "add_")
    assert t.values[add.label].item() == 1 and model[1].num_batches_tracked.item() == 1
    report = validation_report(t)
    assert report.passed, report.to_text()
    assert model[1].num_batches_tracked.item() == 1  # replay wrote copies, never the model's buffer
    assert t[add.label].attrs["args"][0] == {"before": "1.num_batches_tracked",
                                             "value": {"dtype": "int64", "shape": [], "data": [0]}}


# -- replays that cannot run are typed findings ------------------------------------------------------
def test_multihead_attention_in_eval_validates_without_crashing():
    torch.manual_seed(0)
    m = nn.MultiheadAttention(32, 4, batch_first=True).eval()
    x = torch.randn(2, 5, 32)
    t = tracer.trace(m, (x, x, x))
    report = validation_report(t)  # non-contiguous parents used to crash the perturbation
    assert report.passed, report.to_text()


class _Once(torch.autograd.Function):
    """A foreign kernel that refuses to run a second time."""

    calls = 0

    @staticmethod
    def forward(ctx, x):
        _Once.calls += 1
        if _Once.calls > 1:
            raise OSError("device handle already released")
        return x * 2

    @staticmethod
    def backward(ctx, g):
        return g * 2


def test_a_replay_that_cannot_run_is_a_finding_naming_the_op():
    class UsesOnce(nn.Module):
        def forward(self, x):
            return _Once.apply(x) + 1

    _Once.calls = 0
    t = tracer.trace(UsesOnce(), (torch.randn(3),))
    report = validation_report(t)
    assert not report.passed
    first = report.findings[0]
    assert first.check == "replay" and "OSError" in first.message and first.label in first.message
    assert not validate(t).passed


# -- the call template ---------------------------------------------------------------------------------
class _Gelu(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.proj = nn.Linear(4, 6)

    def forward(self, x):
        y = nn.functional.gelu(self.proj(x), approximate="tanh")
        return torch.cat([y, x], dim=-1)[..., 1:5].to(torch.float64)


@pytest.mark.parametrize("save", ["all", "none"])
def test_every_op_records_its_non_tensor_arguments(save):
    t = tracer.trace(_Gelu(), (torch.randn(2, 4),), capture=tracer.CaptureOptions(save=save))
    by_kind = {op.kind: op.attrs for op in t.ops}
    assert by_kind["gelu"] == {"call": "torch._C._nn.gelu", "args": [{"edge": "0"}], "kwargs": {"approximate": "tanh"}}
    assert by_kind["linear"]["args"] == [{"edge": "0"}, {"param": "proj.weight"}, {"param": "proj.bias"}]
    assert by_kind["cat"]["args"] == [[{"edge": "0.0"}, {"edge": "0.1"}]] and by_kind["cat"]["kwargs"] == {"dim": -1}
    assert by_kind["getitem"]["args"][1] == {"tuple": [{"ellipsis": None}, {"slice": [1, 5, None]}]}
    assert by_kind["to"]["args"][1] == {"dtype": "float64"}
    for op in t.ops:
        json.dumps(dict(op.attrs), allow_nan=False)  # plain JSON, every op


def test_call_templates_survive_save_and_load(tmp_path):
    t = tracer.trace(_Gelu(), (torch.randn(2, 4),))
    loaded = tracer.load(t.save(tmp_path / "tr"))
    assert next(op for op in loaded.ops if op.kind == "gelu").attrs["kwargs"] == {"approximate": "tanh"}
    assert [dict(op.attrs) for op in loaded.ops] == [json.loads(json.dumps(dict(op.attrs))) for op in t.ops]


class _PoolAtIndex(nn.Module):
    """CLIP-style pooling `h[arange(batch), ids.argmax(-1)]` and a rotary-style empty slice."""

    def forward(self, h, ids):
        pooled = h[torch.arange(h.shape[0]), ids.argmax(-1)]
        rest = h[..., h.shape[-1]:]  # an empty slice (no pass-through dimensions left)
        return pooled, rest


def test_an_index_into_a_dimension_of_size_one_and_an_empty_output_are_not_false_alarms():
    torch.manual_seed(0)
    t = tracer.trace(_PoolAtIndex(), (torch.randn(1, 6, 4), torch.randint(0, 9, (1, 6))))
    report = validation_report(t)
    assert report.passed, report.to_text()
    reasons = {why for _op, _pos, why in report.not_perturbable} | {why for _op, _pos, why in report.excused}
    assert "not perturbable: indices into a dimension of size 1: the only valid index is 0" in reasons
    assert "the output is empty: it holds no values to change" in reasons
    # with a batch of 2 the arange index really selects rows: its edge must carry data
    t2 = tracer.trace(_PoolAtIndex(), (torch.randn(2, 6, 4), torch.randint(0, 9, (2, 6))))
    assert validation_report(t2).passed and validation_report(t2).edges_carrying > 0
