"""[issue 7] DTensor detection in one process; the multi-process captures live in tests/distributed/ (issue 16).

The refusal tests this file held (a `parallelize_module` MLP and a `tp_plan="auto"` Llama refused on
a 2-process gloo mesh) were replaced by tests/distributed/test_tensor_parallel.py, which captures
the same two setups and checks their layouts, collectives and bit-equal outputs.
"""
from __future__ import annotations

import torch
from torch import nn


class MLP(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.up = nn.Linear(8, 16)
        self.down = nn.Linear(16, 8)

    def forward(self, x):
        return self.down(torch.relu(self.up(x)))


def test_single_process_detection_has_no_findings_for_a_plain_model():
    from tracer.distributed.admission import distributed_findings

    assert distributed_findings(MLP(), (torch.randn(2, 8),)) is None
    from tests.models import tiny_llama

    assert distributed_findings(tiny_llama()) is None  # a class-level _tp_plan alone is not tensor parallel
