"""[issue 16] `validate_rank` never sends: a DTensor op that redistributes inside the call is listed, not replayed.

One process on torch's fake backend (world size 2; it moves nothing, so no peer is needed): a forward
multiplies a `Shard(0)` DTensor input by a `Shard(0)` DTensor weight, which DTensor can only compute
after all-gathering the weight inside `torch.mm` (the capture does not see that all-gather). Replaying
it, the validation's dispatch mode stops the all-gather before it runs and lists the op as not checked,
naming the reason; the plain local ops around it replay bit for bit and the report passes.
"""
from __future__ import annotations

import torch
import torch.distributed as dist
from torch import nn


def test_a_communicating_dtensor_op_is_listed_not_replayed():
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import DTensor, Shard, distribute_tensor
    from torch.testing._internal.distributed.fake_pg import FakeStore

    import tracer
    import tracer.distributed as td

    dist.init_process_group("fake", store=FakeStore(), rank=0, world_size=2)
    try:
        mesh = init_device_mesh("cpu", (2,), mesh_dim_names=("tp",))

        class RowTimesRow(nn.Module):
            def __init__(self) -> None:
                super().__init__()
                self.weight = nn.Parameter(distribute_tensor(torch.randn(8, 8), mesh, [Shard(0)]))

            def forward(self, x):
                y = DTensor.from_local(x * 2.0, mesh, [Shard(0)], run_check=False)
                return torch.mm(y, self.weight).to_local() + 1.0

        with torch.no_grad():
            t = tracer.trace(RowTimesRow(), (torch.randn(4, 8),))
        report = td.validate_rank(t)
    finally:
        dist.destroy_process_group()
    mm = next(op.label for op in t.ops if op.kind == "mm")
    reasons = dict(report.replay_not_checked)
    assert "would redistribute an input across ranks" in reasons[mm], report.to_text()
    assert report.passed and report.ops_exact >= 2 and mm not in {f.label for f in report.findings}
