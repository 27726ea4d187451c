"""Discharge with a cache on one side: constant-only subgraphs compare by the values they feed, disclosed."""
from __future__ import annotations

import functools

import torch
from torch import nn

import tracer
from tracer.claims.join import fold_constants

# The model sees meta (no simulated device): a cache keyed by the device is filled afresh on meta. Under
# a simulated cpu it would hand the meta capture the real run's tensor (refused: test_simulated_device.py).
SO = tracer.CaptureOptions(structure_only=True, simulate_device=None)


@functools.lru_cache(maxsize=4)
def _coords(n: int, device: torch.device) -> torch.Tensor:
    """Patch-centre coordinates, cached per size and device (as DINOv3 caches them)."""
    grid = (torch.arange(0.5, n, device=device) / n) * 2 - 1
    return torch.stack(torch.meshgrid(grid, grid, indexing="ij"), dim=-1).flatten(0, 1)


class _CachedCoords(nn.Module):
    def __init__(self, shift: bool = False) -> None:
        super().__init__()
        self.lin = nn.Linear(2, 4)
        self.shift = shift

    def forward(self, x):
        pos = self.lin(_coords(2, x.device) * 3.0)
        return (x + pos).relu() if not self.shift else (x - pos).relu()


def _pair(shift_real: bool = False):
    torch.manual_seed(0)
    real = _CachedCoords(shift_real).eval()
    with torch.device("meta"):
        twin = _CachedCoords().eval()
    x = torch.randn(4, 4)
    real(x)  # the plain forward fills the cache: the capture then reads a constant
    return tracer.trace(twin, (x.to("meta"),), capture=SO), tracer.trace(real, (x,))


def test_a_cached_constant_on_the_real_side_corroborates_with_the_folding_disclosed():
    st, rt = _pair()
    assert any(op.kind == "arange" for op in st.ops) and not any(op.kind == "arange" for op in rt.ops)
    result = st.discharge_against(rt)
    assert result.state == "CORROBORATED" and result.contradiction is None
    assert result.folded["claimed_constant_ops"] > result.folded["observed_constant_ops"] >= 1
    assert "computed outside this forward" in str(result)
    assert result.envelope.discharge["constants_folded"] == dict(result.folded)


def test_folding_still_refutes_a_difference_outside_the_constants():
    st, rt = _pair(shift_real=True)
    result = st.discharge_against(rt)
    assert result.state == "REFUTED" and result.folded is None
    assert result.contradiction["claimed"] == "add" and result.contradiction["observed"] == "sub"


def test_fold_constants_keeps_inputs_parameters_and_random_draws():
    rows = [["input_1", "input", "input", "", [], [2], "float32", [], 0, 1],
            ["arange_1", "arange", "torch.arange", "", [], [2], "float32", [], 0, 1],
            ["randn_1", "randn", "torch.randn", "", [], [2], "float32", [], 0, 1],
            ["mul_1", "mul", "torch.mul", "", [["arange_1", "0"], ["arange_1", "1"]], [2], "float32", [], 0, 1],
            ["add_1", "add", "torch.add", "", [["input_1", "0"], ["mul_1", "1"]], [2], "float32", ["w"], 0, 1]]
    kept, folded = fold_constants(rows)
    assert folded == 2 and [r[0] for r in kept] == ["input", "randn", "add"]
    assert kept[2][3] == [[0, "0"], [["constant", [2], "float32"], "1"]]


class _DeviceBranch(nn.Module):
    def forward(self, x):
        return x.float() if x.device.type == "cpu" else x.int()  # one line, a path per device


def test_a_device_branch_is_refuted_naming_the_one_line_both_sides_ran():
    x = torch.zeros(3)
    result = tracer.trace(_DeviceBranch(), (x.to("meta"),), capture=SO).discharge_against(
        tracer.trace(_DeviceBranch(), (x,)))
    c = result.contradiction
    assert result.state == "REFUTED" and c["claimed_site"] == c["observed_site"] and "in forward" in c["claimed_site"]
    assert "one line took a different path" in str(result) and "simulate_device" in str(result)
