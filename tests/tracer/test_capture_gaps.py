"""Every capture records the computation or says it did not (issue #35 deliver 2).

torch.compile'd models and regions are traced as their eager graph and disclosed; higher-order ops
are one boundary op each; a nested `tracer.trace` leaves no machinery in the outer trace; a forward
whose parameters no op read, or whose output no op produced, is `verified=False` with the cause named.
"""
from __future__ import annotations

import warnings

import pytest
import torch
from torch import nn

import tracer
from tracer.errors import TracerError


def _kinds(t) -> list[str]:
    return [op.kind for op in t.ops]


class Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.a = nn.Linear(4, 4)
        self.b = nn.Linear(4, 4)

    def forward(self, x):
        return self.b(torch.relu(self.a(x)))


@torch.compile(backend="eager")
def _compiled_sin(x):
    return torch.sin(x) * 2


class CallsCompiled(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(4, 4)
        self.sub = torch.compile(nn.Linear(4, 4), backend="eager")

    def forward(self, x):
        return self.sub(_compiled_sin(self.lin(x)))


def test_a_compiled_model_is_traced_through_its_original_module_and_disclosed():
    torch.manual_seed(0)
    plain = Block()
    x = torch.randn(2, 4)
    compiled = torch.compile(plain, backend="eager")
    compiled(x)  # compiled and cached before the capture: what is recorded must not depend on it
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        got = tracer.trace(compiled, (x,))
    want = tracer.trace(plain, (x,))
    assert _kinds(got) == _kinds(want) == ["input", "linear", "relu", "linear", "output"]
    assert [op.params for op in got.ops] == [op.params for op in want.ops]
    assert got.provenance["compiled"]["traced"] == "eager"
    assert got.provenance["compiled"]["unwrapped"] == 1
    assert any("torch.compile wrapper" in w for w in got.warnings)
    assert not any("functorch" in w for w in got.warnings)
    assert got.provenance.verified
    assert torch.equal(got.output, compiled(x))
    report = tracer.validate(got)
    assert report.passed and report.ops_exact == report.ops_replayed > 0


def test_regions_compiled_inside_a_forward_run_eagerly_and_are_recorded_op_by_op():
    m = CallsCompiled()
    x = torch.randn(2, 4)
    m(x)
    m(x)  # compiled and cached
    first = tracer.trace(m, (x,))
    again = tracer.trace(m, (x,))
    assert _kinds(first) == _kinds(again) == ["input", "linear", "sin", "mul", "linear", "output"]
    assert first.provenance["compiled"]["compiled_regions_ran"] is True
    assert first.provenance["compiled"]["compiled_submodules"] == ["sub"]
    assert [op.params for op in first.ops if op.kind == "linear"][1] == ("sub._orig_mod.weight", "sub._orig_mod.bias")


def test_a_transform_whose_output_no_op_produced_is_a_disclosed_gap():
    class VMapped(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.lin = nn.Linear(4, 4)

        def forward(self, x):
            return torch.vmap(self.lin)(x)

    t = tracer.trace(VMapped(), (torch.randn(3, 4),))
    assert not t.provenance.verified
    reasons = " ".join(t.provenance.unverified_reasons)
    assert "no recorded op produced" in reasons and "no recorded op read any of them" in reasons
    assert not tracer.validate(t).passed


def test_a_plain_model_has_no_gap():
    t = tracer.trace(Block(), (torch.randn(2, 4),))
    assert t.provenance.verified and "compiled" not in t.provenance


class Cond(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(4, 4)

    def forward(self, x):
        y = self.lin(x)
        return torch.cond(y.sum() > 0, lambda v: v.sin(), lambda v: v.cos(), (y,))


def test_torch_cond_is_one_boundary_op():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        t = tracer.trace(Cond(), (torch.randn(2, 4),))
    assert _kinds(t) == ["input", "linear", "sum", "gt", "cond", "output"]
    assert t.provenance["foreign_kernels"]["cond_1"]["boundary"] == "higher_order_op"
    assert any("higher-order op torch.ops.higher_order.cond" in w for w in t.warnings)
    assert t.provenance.verified  # the parameters are read by a recorded op; the branches take y as an operand
    assert tracer.validate(t).passed


def test_while_loop_is_one_boundary_op():
    from torch._higher_order_ops.while_loop import while_loop

    class Loop(nn.Module):
        def forward(self, x):
            return while_loop(lambda i, y: i < 3, lambda i, y: (i + 1, y * 2), (torch.tensor(0), x))[1]

    x = torch.randn(2, 4)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        loop = tracer.trace(Loop(), (x,))
    assert {v["boundary"] for v in loop.provenance["foreign_kernels"].values()} == {"higher_order_op"}
    assert torch.equal(loop.output, x * 8)


class Mapped(nn.Module):
    def __init__(self, use: bool) -> None:
        super().__init__()
        self.fc = nn.Linear(4, 3)
        self.use = use

    def forward(self, x):
        from torch._higher_order_ops.map import map as hop_map

        out = hop_map(lambda r, w: torch.relu(r * w), x, self.fc.bias.sum())
        return self.fc(out) if self.use else out


@pytest.mark.parametrize("use", [True, False])
def test_map_is_refused_typed_whether_or_not_the_forward_breaks_on_its_output(use):
    x = torch.randn(3, 4)
    assert isinstance(Mapped(use)(x), torch.Tensor)  # the plain forward gets a tensor
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with pytest.raises(TracerError) as err:
            tracer.trace(Mapped(use), (x,))
    assert err.value.code == "higher_order_op_unsupported"


class Nesting(nn.Module):
    def __init__(self, other: nn.Module, inner: bool) -> None:
        super().__init__()
        self.lin = nn.Linear(4, 4)
        self.other = [other]  # not a submodule
        self.inner = inner
        self.inner_trace = None

    def forward(self, x):
        other = self.other[0]
        if self.inner:
            self.inner_trace = tracer.trace(other, (x,))
        else:
            other(x)
        return self.lin(x) + other(x)


def test_a_nested_trace_leaves_the_outer_trace_as_it_would_be_without_it():
    torch.manual_seed(0)
    other = nn.Linear(4, 4)
    x = torch.randn(2, 4)
    with_inner = Nesting(other, inner=True)
    without = Nesting(other, inner=False)
    without.lin = with_inner.lin
    got = tracer.trace(with_inner, (x,))
    want = tracer.trace(without, (x,))
    assert _kinds(got) == _kinds(want)
    assert "detach" not in _kinds(got) and "cpu" not in _kinds(got)
    assert [op.params for op in got.ops] == [op.params for op in want.ops]
    assert _kinds(with_inner.inner_trace) == ["input", "linear", "output"]
    assert with_inner.inner_trace.ops[1].params == ("weight", "bias")


def test_a_nested_trace_of_a_submodule_is_refused_typed():
    class Inner(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.lin = nn.Linear(4, 4)

        def forward(self, x):
            tracer.trace(self.lin, (x,))
            return self.lin(x)

    with pytest.raises(TracerError) as err:
        tracer.trace(Inner(), (torch.randn(2, 4),))
    assert err.value.code == "model_already_capturing"


def test_the_eager_stance_holds_in_the_capturing_thread_only_and_is_restored():
    import threading

    import torch._dynamo.eval_frame as eval_frame

    seen: dict[str, str] = {}

    class Looks(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.lin = nn.Linear(4, 4)

        def forward(self, x):
            seen["capturing"] = eval_frame._stance.stance
            other = threading.Thread(target=lambda: seen.__setitem__("other", eval_frame._stance.stance))
            other.start()
            other.join()
            return self.lin(x)

    before = eval_frame._stance
    tracer.trace(Looks(), (torch.randn(2, 4),))
    assert seen == {"capturing": "force_eager", "other": "default"}
    assert eval_frame._stance is before


def test_a_saved_trace_of_a_compiled_model_validates_offline_with_the_compiled_model_as_params(tmp_path):
    compiled = torch.compile(Block(), backend="eager")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        t = tracer.trace(compiled, (torch.randn(2, 4),))
    t.save(tmp_path / "t")
    report = tracer.validate(tracer.load(tmp_path / "t"), params=compiled)
    assert report.passed, report.findings


def test_flex_attention_is_one_boundary_op_and_its_own_compile_is_not_disclosed_as_the_users():
    from torch.nn.attention.flex_attention import flex_attention

    class Flex(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.qkv = nn.Linear(4, 12)

        def forward(self, x):
            q, k, v = self.qkv(x).unflatten(-1, (3, 4)).unbind(-2)
            return flex_attention(q, k, v)

    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        t = tracer.trace(Flex(), (torch.randn(1, 1, 8, 4),))
    kinds = {v["boundary"] for v in t.provenance["foreign_kernels"].values()}
    assert kinds == {"higher_order_op"} and "compiled" not in t.provenance
    assert not any("compiled code" in w for w in t.warnings)
    assert all("first at" in w for w in t.warnings if "functorch transform" in w)
