"""The fast paths of save write the bytes the plain paths write: call templates and module stacks made plain
once per distinct value, and value layouts read from one pass over the tensors."""
from __future__ import annotations

import dataclasses

import msgspec
import pytest
import torch

import tracer
from tests.models import tiny_gpt2
from tests.tracer import _offline_layout_model as layout_model
from tests.tracer._store_rows import op_rows
from tracer.store.codec import _ENCODER, Body, _BodyEncoder, encode_body, plain_json, provenance_to_json
from tracer.store.values import _kept_layout, _layout, row_major

IDS = torch.tensor([[5, 17, 3, 99, 42, 7, 0, 61]])


def _body(trace: tracer.Trace) -> Body:
    return Body(model_class=trace.model_class, ops=trace.ops, modules=tuple(trace.modules.values()),
                params=tuple(trace.params.values()), provenance=provenance_to_json(trace.provenance),
                warnings=tuple(trace.warnings), envelope=None)


def _odd(trace: tracer.Trace) -> tracer.Trace:
    """Call templates holding what JSON cannot say as it is: NaN and infinities (written null), None,
    huge ints, tuples, non-string keys, objects; some in several ops, some once."""
    odd = [{"call": "torch.add", "args": [float("nan"), None], "kwargs": {}},
           {"call": "torch.add", "args": [None, None], "kwargs": {}},
           {"call": "torch.add", "args": [float("inf")], "kwargs": {"big": 10**30, 3: (1, 2)}},
           {"call": "torch.add", "args": [[1.5, -0.0, 0.0, 2**63]], "kwargs": {"o": object()}}]

    class Lazy:  # a mapping that is not a dict, as a capture's call templates are: the hook makes it plain
        def __init__(self, data):
            self.data = data

        def keys(self):
            return self.data.keys()

        def __getitem__(self, k):
            return self.data[k]

    from collections.abc import Mapping

    Mapping.register(Lazy)
    ops = tuple(dataclasses.replace(op, attrs=Lazy(odd[op.index % 4])) if op.index > 2 else op for op in trace.ops)
    return dataclasses.replace(trace, ops=ops)


@pytest.mark.parametrize("case", ["gpt2", "layout", "odd"])
def test_body_encoder_writes_the_bytes_of_the_plain_encoder(case):
    if case == "layout":
        t = tracer.trace(layout_model.build(), (layout_model.inputs(),))
    else:
        t = tracer.trace(tiny_gpt2(), (IDS,))
        if case == "odd":
            t = _odd(t)
    body = _body(t)
    fast = _BodyEncoder().encoder.encode(body)
    assert fast == _ENCODER.encode(body)
    decoded = msgspec.json.decode(fast)
    if case == "odd":
        attrs = [op["attrs"] for op in decoded["ops"][4:8]]  # odd[0] to odd[3]
        assert attrs[0]["args"] == ["nan", None] and attrs[1]["args"] == [None, None]
        assert attrs[2]["kwargs"] == {"big": str(10**30), "3": [1, 2]} and attrs[2]["args"] == ["inf"]
        assert attrs[3]["args"] == [[1.5, -0.0, 0.0, 2**63]] and attrs[3]["kwargs"]["o"].startswith("<object")
    else:
        assert decoded["ops"][5]["attrs"] == plain_json(dict(t.ops[5].attrs))


def test_saved_odd_templates_load():
    t = _odd(tracer.trace(tiny_gpt2(), (IDS,), capture=tracer.CaptureOptions(save="none")))
    body = encode_body(t)
    assert op_rows(msgspec.json.decode(body))[5]["attrs"] == plain_json(dict(t.ops[5].attrs))


@pytest.mark.parametrize("make", [
    lambda: torch.randn(3, 4), lambda: torch.randn(3, 4).t(), lambda: torch.randn(2, 3, 4).permute(2, 0, 1),
    lambda: torch.randn(4, 6)[:, :3], lambda: torch.ones(1, 4).expand(3, 4), lambda: torch.randn(8)[::2],
    lambda: torch.tensor(1.0), lambda: torch.zeros(0, 3), lambda: torch.randn(3, 1).as_strided((3, 1), (1, 7)),
    lambda: torch.arange(12.0).reshape(3, 4, 1).permute(2, 1, 0).as_strided((1, 4, 3), (999, 1, 4)),
    lambda: torch.ones(1, 1).expand(3, 1), lambda: torch.arange(16).as_strided((1,), (8,)),
])
def test_layouts_read_from_shape_and_strides_agree_with_torch(make):
    t = make()
    numel, stride = t.numel(), t.stride()
    kept = (numel >= 2 and 0 not in stride and stride != row_major(tuple(t.shape))
            and t.permute(sorted(range(t.dim()), key=lambda d: -stride[d])).is_contiguous())
    view = numel > 1 and stride != row_major(tuple(t.shape)) and not kept
    assert _kept_layout(t) == kept
    assert _layout(tuple(t.shape), stride) == ("kept" if kept else "view" if view else "plain")
