"""What tests/tracer/test_safe_build.py compares: the warnings of importing `tracer`, which C entry points the
session and the build hold, and a small model's capture (every record field in use) in plain data."""
from __future__ import annotations

import re
import warnings
from typing import Any


def report() -> dict[str, Any]:
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        import tracer
        from tracer.capture import build, hotpath, session
    import torch
    from torch import nn

    class Model(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.lin, self.norm = nn.Linear(4, 4), nn.BatchNorm1d(4)
            self.register_buffer("scale", torch.full((4,), 2.0))

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            h = self.norm(torch.relu(self.lin(x))) * self.scale
            a, b = torch.split(torch.cat([h, x], dim=1), 4, dim=1)  # a list argument, two outputs
            self.scale.mul_(1.0)  # an in-place write into a buffer
            return (a + b).relu_()

    torch.manual_seed(0)
    model = Model().train()
    t = tracer.trace(model, (torch.randn(3, 4),), capture=tracer.CaptureOptions(save="all"))
    ops = [(op.label, op.kind, str(op.func), op.parents, op.module, op.module_call, op.module_stack, op.params,
            op.buffer_writes, op.inplace, op.source, op.io_path, op.output_index, op.num_outputs) for op in t.ops]
    pieces = {"session": [session._SCAN_ARGS, session._RECORD_OUTPUTS, session._SITE, session._TORCH_FUNCTION],
              "build": [build._BUILD_OPS, build._OP_LABELS, build._MODULE_SCOPES, build._PARAM_RECORDS]}
    return {
        "file": tracer.__file__, "active": hotpath.ACTIVE,
        "warnings": [[type(w.message).__name__, getattr(w.message, "reason", None), str(w.message)] for w in seen],
        "c_pieces": {k: [p is not None for p in v] for k, v in pieces.items()},
        "trace": re.sub(r"0x[0-9a-f]+", "0x", repr((ops, sorted(t.modules.items()), sorted(t.params.items())))),
        "values": {k: round(float(v.double().sum()), 6) for k, v in t.values.items()},
    }
