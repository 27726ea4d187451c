"""The bodies of tests/gpu/test_cuda_paths.py run on the cpu, so CI (no GPU) keeps them working code."""
from __future__ import annotations

import pytest

from tests.gpu import test_cuda_paths as paths


@pytest.mark.parametrize("check", ["_check_fast_paths", "_check_backward", "_check_simulated_device"])
def test_the_cuda_checks_hold_on_the_cpu(check):
    getattr(paths, check)("cpu")


def test_the_twin_and_store_check_holds_on_the_cpu(tmp_path):
    paths._check_twin_and_store("cpu", tmp_path / "t")
