"""The capture's C extensions (`tracer/capture/_walk.c`, `_hotpath.c`, `_assembly.c`) record exactly what
the Python path records.

The README's install command builds them (`setup.py`, optional where no C compiler exists); these tests
check they were built here, and capture each model twice in one process, with the C loops and with the
Python in their place, comparing every field of every op, every module scope and call, every parameter
record and every saved value, and compare the C model walks with torch's own. The models cover each case the C code hands back to Python: buffers (watched for writes),
tensors no op produced (constants), in-place writes, lists of tensors, keyword tensors, dict and
namedtuple outputs, parameters returned as they are.
"""
from __future__ import annotations

import os
import subprocess
import sys
import sysconfig
from collections import namedtuple
from shutil import which

import pytest
import torch
from torch import nn

import tracer
from tests.models import tiny_bert, tiny_gpt2, tiny_llama, tiny_qwen3_moe, tiny_resnet
from tracer.capture import build, hotpath, scopes, session, walk
from tracer.capture import kernel
from tracer.capture.kernel import contract
from tracer.weights_free import constants

needs_extension = pytest.mark.skipif(not hotpath.ACTIVE, reason="the C extension is not built in this environment")

Pair = namedtuple("Pair", "first second")


class _Odd(nn.Module):
    """Every case the C loops hand back to Python, in one forward."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(4, 4)
        self.lin2 = nn.Linear(2, 2)
        self.norm = nn.BatchNorm1d(4)  # train mode: running stats are buffers written by the kernel
        self.register_buffer("scale", torch.full((4,), 2.0))
        self.const = torch.ones(4)  # a plain attribute: a tensor no op produced
        self.act = nn.ReLU()  # called twice: two module calls
        self.again = self.act  # one child registered under two names
        self.empty = nn.ModuleList()  # a module that is false (len 0)

    def forward(self, x: torch.Tensor, *, bias: torch.Tensor) -> dict:
        h = self.act(self.norm(self.act(self.lin(x))))
        h = h * self.scale + self.const
        h = torch.cat([h, x], dim=1)  # a list of tensors
        parts = torch.split(h, 2, dim=1)  # a tuple of outputs
        y = torch.stack(list(parts), dim=0).sum(0)
        y = torch.add(y, bias[:2], alpha=0.5)  # a tensor reached through a view
        y = torch.add(y, other=x[:, :2])  # a keyword tensor
        y = nn.functional.linear(y, self.lin2.weight, bias=self.lin2.bias)  # a keyword parameter
        y.relu_()  # in place
        self.scale.mul_(1.0)  # an in-place write into a buffer
        z = torch.empty_like(y)
        torch.mul(y.detach(), 2, out=z)  # out=
        return {"y": y, "pair": Pair(z, self.lin.weight)}  # a dict, a namedtuple, a parameter as it is


def _canonical(t: tracer.Trace) -> tuple:
    ops = tuple((op.label, op.kind, op.func, op.parents, op.out, op.func_call_id, op.output_index, op.num_outputs,
                 op.module, op.module_call, op.module_stack, op.params, op.buffer_writes, op.inplace, op.source,
                 op.io_path, op.attrs, op.layout, op.collective, op.rank, type(op)) for op in t.ops)
    modules = tuple(sorted((addr, scope) for addr, scope in t.modules.items()))
    return ops, modules, tuple(sorted(t.params.items())), t.warnings


def _same_values(a: tracer.Trace, b: tracer.Trace) -> bool:
    """Same labels saved, same values (but those of `torch.empty*`: uninitialized memory differs run to run)."""
    return a.values.keys() == b.values.keys() and all(
        torch.equal(a.values[k], b.values[k]) for k in a.values if not k.startswith("empty"))


def _python_path(monkeypatch: pytest.MonkeyPatch) -> None:
    """The Python kernel until `monkeypatch` undoes it: every C object bound in the package set to None, found by
    scanning (`kernel.native._bindings`), not from a list of names (a new entry point cannot be left on)."""
    for space, key, _value in kernel.native._bindings():
        monkeypatch.setitem(space, key, None)
    assert kernel.current() == "python"


def _both(monkeypatch: pytest.MonkeyPatch, capture) -> tuple[tracer.Trace, tracer.Trace]:
    with_c = capture()
    with monkeypatch.context() as m:
        _python_path(m)
        with_python = capture()
    return with_c, with_python


def _ids() -> torch.Tensor:
    return torch.randint(0, 100, (1, 6), generator=torch.Generator().manual_seed(0))


# Each case built only by the test that runs it: (model, args, kwargs).
CASES = {
    "gpt2": lambda: (tiny_gpt2(), (_ids(),), {}),
    "llama": lambda: (tiny_llama(), (_ids(),), {}),
    "llama_sdpa": lambda: (tiny_llama(attn="sdpa"), (_ids(),), {}),
    "bert": lambda: (tiny_bert(), (_ids(),), {}),
    "resnet_train": lambda: (tiny_resnet().train(), (torch.randn(2, 3, 16, 16),), {}),
    "qwen3_moe": lambda: (tiny_qwen3_moe(), (_ids()[:, :4] % 64,), {}),
    "odd": lambda: (_Odd().train(), (torch.randn(3, 4),), {"bias": torch.randn(4)}),
}


@needs_extension
@pytest.mark.parametrize("save", ["all", "none"])
@pytest.mark.parametrize("case", list(CASES))
def test_the_c_loops_record_what_the_python_records(monkeypatch, case, save):
    model, args, kwargs = CASES[case]()
    options = tracer.CaptureOptions(save=save)
    state = {k: v.clone() for k, v in model.state_dict().items()}

    def capture() -> tracer.Trace:
        model.load_state_dict(state)  # the in-place buffer writes start from the same values
        return tracer.trace(model, args, input_kwargs=kwargs, capture=options)

    with_c, with_python = _both(monkeypatch, capture)
    assert _canonical(with_c) == _canonical(with_python)
    assert _same_values(with_c, with_python)
    assert bool(with_c.values) == (save == "all")


@needs_extension
def test_the_c_loops_record_a_weights_free_capture_as_the_python_does(monkeypatch):
    from tracer.bridges.transformers import build_meta_model, load_config, trace_ids

    model = build_meta_model(load_config("llama-3.1-8b"))
    with_c, with_python = _both(monkeypatch, lambda: trace_ids(model, (1, 8)))
    assert _canonical(with_c) == _canonical(with_python)
    assert len(with_c.ops) > 1900


def _walk_model() -> nn.Module:
    """Shared modules and a tied parameter, None entries, an empty container, a ModuleDict, a non-ASCII name."""
    from collections import OrderedDict

    shared = nn.Linear(2, 2)
    model = nn.Sequential(OrderedDict(a=shared, b=nn.Sequential(shared, nn.ReLU()), c=nn.ModuleDict({"x": nn.Linear(2, 2)}),
                                      d=nn.ModuleList()))
    model.register_module("gone", None)
    model.b.register_buffer("buf", torch.ones(1))
    model.register_buffer("nothing", None)
    model.b[1].register_parameter("tied", model.c.x.weight)
    model.c.add_module("größe", nn.Linear(1, 1))
    return model


@needs_extension
@pytest.mark.parametrize("dedup", [True, False])
def test_the_c_walks_walk_as_torch_and_the_python_walks(monkeypatch, dedup):
    model = _walk_model()

    def walks() -> tuple:
        modules = walk.named_modules(model, remove_duplicate=dedup)
        every = walk.named_modules(model, remove_duplicate=False)
        return ([(name, id(m)) for name, m in modules], [(name, id(m)) for name, m in walk.first_visits(every)],
                [(name, id(t)) for table in ("_parameters", "_buffers")
                 for name, t in walk.named_state(model, table, remove_duplicate=dedup, modules=every)])

    with_c = walks()
    with monkeypatch.context() as m:
        _python_path(m)
        with_python = walks()
    torch_own = ([(name, id(m)) for name, m in model.named_modules(remove_duplicate=dedup)],
                 [(name, id(m)) for name, m in model.named_modules()],
                 [(name, id(t)) for name, t in [*model.named_parameters(remove_duplicate=dedup),
                                                 *model.named_buffers(remove_duplicate=dedup)]])
    assert with_c == with_python == torch_own
    assert walk.named_modules(model, remove_duplicate=dedup) is not None and walk._C_NAMED_MODULES is not None


@needs_extension
def test_a_table_that_is_no_plain_dict_is_walked_in_python():
    """The C walks hand back (None) where a module's table is a dict subclass, and the Python walks it."""
    from collections import OrderedDict

    model = nn.Sequential(nn.Linear(2, 2))
    model._modules = OrderedDict(model._modules)
    model[0]._parameters = OrderedDict(model[0]._parameters)
    assert hotpath.named_modules(model, True) is None
    assert hotpath.named_state([("0", model[0])], "_parameters", True) is None
    assert [n for n, _ in walk.named_modules(model)] == ["", "0"]
    assert [n for n, _ in walk.named_state(model, "_parameters")] == ["0.weight", "0.bias"]


@needs_extension
def test_the_c_scan_walks_list_and_keyword_arguments():
    """The C scan itself (not the Python fallback) reports each tensor of a list argument and each keyword tensor."""
    tmap: dict = {}
    a, b = torch.ones(1), torch.ones(1)
    tmap[id(a)] = (3, a)
    tmap[id(b)] = (7, a)  # a stale entry: another tensor held under b's id
    assert session._SCAN_ARGS(([a, a], 1), {}, tmap, {}, set(), False) == (((3, "0.0"), (3, "0.1")), (), None, True)
    assert session._SCAN_ARGS(([a, b],), {}, tmap, {}, set(), False) is None  # b: the Python path adopts it
    assert session._SCAN_ARGS((a, 2.0), {"other": a}, tmap, {}, set(), False) == (
        ((3, "0"), (3, "other")), (), (session.TENSOR, 2.0), False)


@needs_extension
def test_the_c_constant_scan_answers_as_the_python_one(monkeypatch):
    meta, other_meta = torch.ones(2, 3, device="meta"), torch.ones(3, device="meta")
    real = torch.ones(2)
    ledger = constants.ConstantLedger()
    ledger.remember(other_meta, torch.ones(3))  # a meta tensor with a known value
    calls = [
        ((meta, 2), {}), ((other_meta, meta), {}), ((real, meta), {"alpha": 2}), (([meta, real], 0), {}),
        ((3, 4.0, "x"), {"dtype": torch.float32}), ((), {}), ((1, [2, (3,)]), {}), ((object(),), {}),
        ((torch.Size([2, 3]),), {"out": real}), ((nn.Parameter(torch.ones(1, device="meta")),), {}),
    ]
    with_c = [ledger.scan(args, kwargs) for args, kwargs in calls]
    with monkeypatch.context() as m:
        m.setattr(constants, "_SCAN_CONSTANTS", None)
        with_python = [ledger.scan(args, kwargs) for args, kwargs in calls]
    assert with_c == with_python
    assert with_c[1] == ([], 2, True, False) and with_c[2] == ([real], 2, False, False)
    assert with_c[4] == ([], 0, False, True) and with_c[7] == ([], 0, False, False)


def test_the_readme_install_builds_the_extension_where_a_compiler_exists():
    compiler = which(sysconfig.get_config_var("CC").split()[0] if sysconfig.get_config_var("CC") else "cc")
    headers = os.path.exists(os.path.join(sysconfig.get_paths()["include"], "Python.h"))
    if hotpath.kernel() == "python":
        pytest.skip(f"this process chose the Python kernel ({hotpath.ENV_KERNEL} / {hotpath.ENV_PURE_PYTHON})")
    if compiler is None or not headers:
        pytest.skip("no C compiler or Python headers here: the install leaves the extension out")
    assert hotpath.ACTIVE, "pip install -e . should have built tracer/capture/_hotpath.c (run it again)"


def test_the_environment_variable_turns_the_extension_off():
    env = {**os.environ, hotpath.ENV_PURE_PYTHON: "1"}
    code = ("from tracer.capture import hotpath, session; "
            "from tracer.capture import build; "
            "from tracer.capture import call_template, scopes; "
            "print(hotpath.ACTIVE, session._SCAN_ARGS, session._RECORD_OUTPUTS, session._SITE, build._BUILD_OPS, "
            "session._TORCH_FUNCTION, build._OP_LABELS, build._MODULE_SCOPES, build._PARAM_RECORDS, "
            "call_template._C_TEMPLATES, scopes._WRAP_FORWARDS, scopes._UNWRAP_FORWARDS)")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True).stdout
    assert out.split() == ["False"] + ["None"] * 11


@needs_extension
def test_the_c_build_makes_ordinary_ops():
    """Ops the C loop builds are Op instances like any other: equal to one built field by field,
    replaceable, frozen, every field set."""
    import dataclasses

    from tracer.ir import Op

    t = tracer.trace(nn.Sequential(nn.Linear(3, 3), nn.ReLU()), (torch.ones(2, 3),))
    assert build._BUILD_OPS is not None
    for op in t.ops:
        assert type(op) is Op
        fields = {f.name: getattr(op, f.name) for f in dataclasses.fields(Op)}
        twin = Op(**fields)
        assert twin == op
        assert dataclasses.replace(op, label="x").label == "x"
        with pytest.raises(dataclasses.FrozenInstanceError):
            op.label = "y"  # type: ignore[misc]
    linear = next(op for op in t.ops if op.kind == "linear")
    assert linear.parents[0].source == t.ops[0].label and linear.module == "0"


@needs_extension
def test_the_c_build_refuses_malformed_records_typed():
    labels, templates = ["a_1"], [{}]
    with pytest.raises(TypeError):
        build._BUILD_OPS([("not", "a", "list")], labels, templates, {}, {}, build._meta, build._site, build._unique)
    with pytest.raises(TypeError):
        build._BUILD_OPS([[None] * 16], labels, templates, {}, {}, build._meta, build._site, build._unique)
    with pytest.raises(TypeError):
        build._BUILD_OPS([], labels, templates, {}, {}, build._meta, build._site, build._unique)  # lengths differ


@needs_extension
@pytest.mark.parametrize("case", ["gpt2", "odd"])
def test_the_two_frame_walks_find_the_same_sites(case):
    """On CPython 3.11 `site` reads the interpreter's frames; the public frame-object walk finds the same sites."""
    model, args, kwargs = CASES[case]()
    capture = lambda: tracer.trace(model, args, input_kwargs=kwargs, capture=tracer.CaptureOptions(save="none"))  # noqa: E731
    fast = capture()
    hotpath._ext.frame_objects(True)
    try:
        public = capture()
    finally:
        hotpath._ext.frame_objects(False)
    assert [op.source for op in fast.ops] == [op.source for op in public.ops]
    assert any(op.source is not None for op in fast.ops)


class _Inspecting(nn.Module):
    """Reads what its child's wrapped forward shows the world while the capture runs."""

    def __init__(self) -> None:
        super().__init__()
        self.inner = nn.Linear(3, 3)
        self.seen: dict = {}

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        import copy
        import inspect

        f = self.inner.forward
        self.seen = {"type": type(f).__name__, "self": f.__self__ is self.inner, "name": f.__name__,
                     "params": list(inspect.signature(f).parameters), "copy": copy.copy(f) is f,
                     "deepcopy": copy.deepcopy(f) is f}
        return self.inner(x)


@needs_extension
def test_the_c_module_wrapper_looks_like_the_forward_it_wraps():
    model = _Inspecting()
    t = tracer.trace(model, (torch.ones(2, 3),))
    assert model.seen == {"type": "ScopedForward", "self": True, "name": "forward", "params": ["input"], "copy": True,
                          "deepcopy": True}
    assert "forward" not in model.inner.__dict__  # removed after the capture
    assert [c.call for c in t.modules["inner"].calls] == [0]


@needs_extension
def test_the_c_module_wrapper_closes_its_scope_when_the_forward_raises(monkeypatch):
    class Boom(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            raise ValueError("inside a child")

    model = nn.Sequential(nn.Linear(3, 3), Boom())
    x = torch.ones(2, 3)
    errors = []
    for c_path in (True, False):
        with monkeypatch.context() as m:
            if not c_path:
                _python_path(m)
            with pytest.raises(ValueError, match="inside a child") as info:
                tracer.trace(model, (x,))
            errors.append(str(info.value))
        assert "forward" not in model[1].__dict__ and "forward" not in model[0].__dict__
    assert errors[0] == errors[1]


class _Routed(nn.Module):
    """A weights-free forward through each branch of the C hook's guard: device reads (of a tensor and of a
    parameter), constants (from Python data, from a factory), a dtype cast, a move to the model's device, a
    meta kernel that refuses (torch._grouped_mm on float32: a declared fallback), a known value beside an
    unknown one, and a branch on the device type."""

    def __init__(self) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.randn(3, 8, 12))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        offs = torch.tensor([3, 7, 10], dtype=torch.int32, device=self.weight.device)
        h = torch._grouped_mm(x * 2, self.weight, offs=offs)
        h = h.to(torch.float64).to(x.device)
        h = torch.cat([torch.zeros(1, 12, dtype=torch.float64, device=x.device), h])
        return h.relu() if x.device.type == "cpu" else h.sigmoid()


@needs_extension
def test_a_weights_free_capture_runs_its_common_calls_in_c_as_the_python_would(monkeypatch):
    with torch.device("meta"):
        model = _Routed()
    x = torch.zeros(10, 8, device="meta")
    in_python: list[str] = []
    slow = session.CaptureSession._torch_function_py

    def counted(self, func, types, args=(), kwargs=None):
        in_python.append(getattr(func, "__name__", repr(func)))
        return slow(self, func, types, args, kwargs)

    def capture() -> tracer.Trace:
        return tracer.trace(model, (x,), capture=tracer.CaptureOptions(structure_only=True))

    with_c, with_python = _both(monkeypatch, capture)
    assert _canonical(with_c) == _canonical(with_python)
    assert [op.kind for op in with_c.ops if op.kind not in ("input", "output")] == [
        "tensor", "mul", "grouped_mm", "to", "to", "zeros", "cat", "relu"]  # the model saw the simulated cpu
    admitted = [t.provenance["admission"] for t in (with_c, with_python)]
    assert admitted[0]["meta_fallbacks"][0]["call"] == "torch._grouped_mm"
    assert [a["meta_fallbacks"][0]["op_index"] for a in admitted] == [3, 3]
    monkeypatch.setattr(session.CaptureSession, "_torch_function_py", counted)
    capture()
    # In C: the device reads, the product, the refused kernel's fallback, the cast, the concatenation of a
    # known value and an unknown one, and the relu. In Python: the constants, and the move, whose device
    # argument names the simulated device.
    assert in_python == ["tensor", "to", "zeros"]


@needs_extension
def test_the_c_hook_reads_the_capture_state_through_its_slots_not_the_instance_dict(monkeypatch):
    """During the forward none of the state the kernel reads is in the session's `__dict__` (it lives in the
    slots of `kernel.contract.CaptureState`); with the C configured for another state class, the session is no
    instance of it and every call takes the Python path, which records the same trace."""
    model = nn.Sequential(nn.Linear(4, 4), nn.Sequential(nn.ReLU(), nn.Linear(4, 2)))
    x = torch.randn(3, 4)
    seen: list = []
    run = session.CaptureSession.run

    def watched(self, *a):
        forward = self.model.forward

        def peek(*args, **kwargs):
            seen.append(sorted(set(contract.STATE_FIELDS) & set(self.__dict__)))
            seen.append(type(self.__dict__.get("__torch_function__")).__name__)
            return forward(*args, **kwargs)
        self.model.forward = peek
        try:
            return run(self, *a)
        finally:
            del self.model.forward

    monkeypatch.setattr(session.CaptureSession, "run", watched)
    plain = tracer.CaptureOptions(record_source=False)  # the counting wrapper below would be the Python path's site
    with_c = tracer.trace(model, (x,), capture=plain)
    assert seen == [[], "method"]  # no state field in the dict; the C hook bound for the forward
    in_python: list[str] = []
    slow = session.CaptureSession._torch_function_py

    def counted(self, func, types, args=(), kwargs=None):
        in_python.append(getattr(func, "__name__", repr(func)))
        return slow(self, func, types, args, kwargs)

    class Other:
        __slots__ = contract.STATE_FIELDS

    monkeypatch.setattr(session.CaptureSession, "_torch_function_py", counted)
    for name in ("_SCOPED_FORWARD", "_WRAP_FORWARDS", "_UNWRAP_FORWARDS"):  # the C wrapper reads the state too
        monkeypatch.setattr(scopes, name, None)
    hotpath._ext.configure_state(Other, tuple(Other.__dict__[n] for n in contract.STATE_FIELDS),
                                 contract.GuardFastPath, contract.guard_fast_descriptors())
    try:
        without = tracer.trace(model, (x,), capture=plain)
    finally:
        hotpath._ext.configure_state(contract.CaptureState, contract.state_descriptors(), contract.GuardFastPath,
                                     contract.guard_fast_descriptors())
    assert in_python == ["linear", "relu", "linear"] and _canonical(without) == _canonical(with_c)


@needs_extension
def test_the_c_record_keeps_values_as_the_sessions_save_does():
    """Saved values, their versions (-1 for an inference tensor) and storage keys (shared by views, a tensor's id
    where it has no storage), in C as `CaptureSession._save` keeps them."""
    from types import SimpleNamespace

    base = torch.arange(6.0)
    base.add_(1)  # version 1
    with torch.inference_mode():
        frozen = torch.ones(2)
    outs = (base, base.view(2, 3), torch.zeros(3).to_sparse(), frozen, torch.empty(0))
    record = tuple([None] * 16)

    def tables() -> SimpleNamespace:
        return SimpleNamespace(values={}, value_versions={}, shared_storage={})

    in_c, in_python = tables(), tables()
    hotpath.record_outputs(outs, record, [], {}, {}, {}, True,
                           (in_c.values, in_c.value_versions, in_c.shared_storage))
    for idx, t in enumerate(outs):
        session.CaptureSession._save(in_python, idx, t)
    assert in_c == in_python
    assert in_c.value_versions[0] == 1 and in_c.value_versions[3] == -1
    assert in_c.shared_storage[base.untyped_storage().data_ptr()] == [0, 1]
    assert in_c.shared_storage[id(outs[2])] == [2] and in_c.shared_storage[id(outs[4])] == [4]
    with pytest.raises(TypeError):  # value tables that are not the session's three dicts
        hotpath.record_outputs(outs, record, [], {}, {}, {}, True, in_c.values)
