"""The capture kernel's contract (`tracer/capture/kernel/contract.py`) is what both kernels share, by structure:

- the C extensions expose exactly the contract's entry points (a C function added without a contract entry, or
  a contract entry the C lacks, fails here), and each names a Python reference that exists;
- `use_kernel("python")` turns off every C object bound anywhere in the package (found by scanning, not from a
  list) and puts each back after; captures in the block run the Python kernel;
- the C holds its own reference to the state it uses across a call into Python;
- the process-global call-description cache needs no lock: its entries are written once, equal whoever writes
  them, and read by the C with a reference taken before any Python runs (checked with two captures forced to
  describe the same calls at the same moment).
"""
from __future__ import annotations

import importlib
import re
import sys
import threading

import pytest
import torch
from torch import nn

import tracer
from tests.models import tiny_gpt2
from tracer.capture import functions, kernel, scopes, session
from tracer.capture.kernel import contract, native

needs_c = pytest.mark.skipif(not native.ACTIVE, reason="the C kernel is not active in this process")


def _c_objects() -> dict[int, str]:
    """id -> name of every public object the built extensions define (read from the modules, not the contract)."""
    found = {}
    for ext in contract.EXTENSIONS:
        mod = sys.modules.get(f"tracer.capture.{ext}")  # not imported where the process chose the Python kernel
        if mod is None:
            continue
        found.update({id(v): f"{ext}.{k}" for k, v in vars(mod).items() if not k.startswith("__")})
    return found


def _bound_c_objects() -> list[str]:
    """Where a tracer module holds a C object now (module.name)."""
    c = _c_objects()
    return [f"{name}.{key}" for name, mod in list(sys.modules.items())
            if mod is not None and (name == "tracer" or name.startswith("tracer.")) and not
            any(name == f"tracer.capture.{e}" for e in contract.EXTENSIONS)
            for key, value in list(vars(mod).items()) if id(value) in c]


@needs_c
def test_the_c_extensions_expose_exactly_the_contracts_entry_points():
    for ext in contract.EXTENSIONS:
        mod = sys.modules[f"tracer.capture.{ext}"]
        public = {k for k in vars(mod) if not k.startswith("__")}
        assert public - contract.EXTENSION_DATA == {n for n, e in contract.ENTRY_POINTS.items() if e.extension == ext}
        assert all(callable(getattr(mod, k)) for k in public - contract.EXTENSION_DATA)
    assert native.entry_points() == {n: getattr(sys.modules[f"tracer.capture.{e.extension}"], n)
                                     for n, e in contract.ENTRY_POINTS.items()}


def test_every_entry_point_names_a_python_reference_that_exists():
    for name, entry in contract.ENTRY_POINTS.items():
        if name.startswith("configure") or name == "frame_objects":
            assert entry.reference == "", name  # set-up calls: no Python counterpart
            continue
        module, _, path = entry.reference.partition(":")
        obj = importlib.import_module(module)
        for part in path.split("."):
            obj = getattr(obj, part)
        assert callable(obj), entry.reference


def test_the_methods_the_c_hands_calls_back_to_exist_on_the_session_and_the_guard():
    from tracer.weights_free.guard import StructureOnlyGuard

    assert all(callable(getattr(session.CaptureSession, name)) for name in contract.SESSION_CALLBACKS)
    assert all(callable(getattr(StructureOnlyGuard, name)) for name in contract.GUARD_CALLBACKS)
    source = (native._FOLDER / "_hotpath.c").read_text()
    for name in contract.SESSION_CALLBACKS + contract.GUARD_CALLBACKS:
        assert f'PyUnicode_InternFromString("{name}")' in source, name
    # no other private name: the callbacks, the guard's two flags it resets, and a tensor's `_version`
    private = set(re.findall(r'PyUnicode_InternFromString\("(_[a-z][a-z_]*)"\)', source))
    assert private == {*contract.SESSION_CALLBACKS, "_constant_call", "_mixed", "_version"}


def test_the_kernel_chosen_for_a_block_turns_off_every_c_object_bound_in_the_package_and_restores_them():
    before = _bound_c_objects()
    assert bool(before) == native.ACTIVE
    with kernel.use_kernel("python") as chosen:
        assert chosen == "python" and kernel.current() == "python"
        assert _bound_c_objects() == []
        assert all(v is None for v in native.entry_points().values())
        with kernel.use_kernel("python"):  # nested: still the Python kernel, and nothing to put back
            assert _bound_c_objects() == []
        assert _bound_c_objects() == []
    assert _bound_c_objects() == before
    assert kernel.current() == ("c" if native.ACTIVE else "python")
    with pytest.raises(tracer.errors.InvalidInputError, match="kernel must be one of"):
        with kernel.use_kernel("cython"):
            pass


def test_a_capture_in_a_python_kernel_block_runs_no_c_hook(monkeypatch):
    model, x = nn.Sequential(nn.Linear(3, 3), nn.ReLU()), torch.randn(2, 3)
    hooks: list[str] = []
    run = session.CaptureSession.run

    def watched(self, *a):
        hooks.append(type(self.__dict__.get("__torch_function__")).__name__)  # before the forward: nothing bound
        return run(self, *a)

    def peek(self, *a, **k):
        hooks.append(type(self.__dict__.get("__torch_function__")).__name__)
        return install(self, *a, **k)

    install = scopes.ModuleScopes._install_scopes
    monkeypatch.setattr(session.CaptureSession, "run", watched)
    monkeypatch.setattr(scopes.ModuleScopes, "_install_scopes", peek)
    with kernel.use_kernel("python"):
        in_python = tracer.trace(model, (x,))
    with_default = tracer.trace(model, (x,))
    assert hooks == ["NoneType", "NoneType", "NoneType", "method" if native.ACTIVE else "NoneType"]
    assert [op.label for op in in_python.ops] == [op.label for op in with_default.ops]


class _Loud(dict):
    """A dict subclass: the C module wrapper's index walk hands it to the session's Python walk."""


@needs_c
def test_the_c_module_wrapper_holds_the_state_it_uses_across_the_python_walk(monkeypatch):
    """`ScopedForward` calls the session's `_indices_in` (Python) for a dict subclass argument; while it runs,
    the lists the wrapper goes on using have a reference held by the C besides the session's slot."""
    seen: list[tuple[int, int, int]] = []
    walk = session.CaptureSession._indices_in

    def counted(self, *objs):
        inside = [v for o in objs for v in (o if isinstance(o, tuple) else (o,))]
        if any(type(v) is _Loud for v in inside):
            seen.append((sys.getrefcount(self.frames), sys.getrefcount(self.records), sys.getrefcount(self.tmap)))
        return walk(self, *objs)

    class Inner(nn.Module):
        def forward(self, d):
            return d["x"] * 2

    class Outer(nn.Module):
        def __init__(self):
            super().__init__()
            self.inner = Inner()

        def forward(self, x):
            return self.inner(_Loud(x=x + 1))

    monkeypatch.setattr(session.CaptureSession, "_indices_in", counted)
    t = tracer.trace(Outer(), (torch.randn(2),))
    assert seen, "the Python walk did not run"
    # each: the slot, getrefcount's argument, and the C's own reference (a borrowed one would make it 2)
    assert all(min(counts) >= 3 for counts in seen), seen
    assert "inner" in t.modules


@pytest.mark.parametrize("kernel_name", ["c", "python"])
def test_two_captures_describing_the_same_calls_at_once_record_what_one_alone_records(monkeypatch, kernel_name):
    """The call-description cache (`functions.INFO_CACHE`, process-global, read by the C hook) has no lock: two
    threads made to describe the same new call at the same moment (each waits for the other inside `_describe`),
    then racing on the rest, write equal entries, and each capture equals the capture made alone."""
    if kernel_name == "c" and not native.ACTIVE:
        pytest.skip("the C kernel is not active in this process")
    models, ids = [tiny_gpt2(), tiny_gpt2()], torch.tensor([[1, 2, 3]])  # one each: a capture wraps its model
    with kernel.use_kernel(kernel_name):
        alone = tracer.trace(models[0], (ids,), capture=tracer.CaptureOptions(save="none"))
    reference = [(op.label, op.parents, op.params, op.module_stack) for op in alone.ops]
    met = threading.Barrier(2, timeout=60)
    describe, meetings = functions._describe, []

    def racing(func):
        if not meetings:  # the first new call of each thread: they meet inside its description
            meetings.append(met.wait())
        return describe(func)

    saved = dict(functions.INFO_CACHE)
    functions.INFO_CACHE.clear()
    monkeypatch.setattr(functions, "_describe", racing)
    results: list = [None, None]

    def capture(i: int) -> None:
        results[i] = tracer.trace(models[i], (ids,), capture=tracer.CaptureOptions(save="none"))

    try:
        with kernel.use_kernel(kernel_name):
            threads = [threading.Thread(target=capture, args=(i,)) for i in range(2)]
            for th in threads:
                th.start()
            for th in threads:
                th.join(120)
    finally:
        functions.INFO_CACHE.update(saved)
    assert len(meetings) >= 2  # the two threads did meet inside a description
    for t in results:
        assert t is not None and [(op.label, op.parents, op.params, op.module_stack) for op in t.ops] == reference
    assert all(info == describe(func) for func, info in functions.INFO_CACHE.items() if func not in saved)


class _SeesKernel(nn.Module):
    """Notes which kernel records its forward."""

    def __init__(self) -> None:
        super().__init__()
        self.fc, self.seen = nn.Linear(3, 3), []

    def forward(self, x):
        self.seen.append(kernel.current())
        return torch.relu(self.fc(x))


def test_the_kernel_is_chosen_per_capture_and_recorded():
    model, x = _SeesKernel(), torch.randn(2, 3)
    default = kernel.current()
    in_python = tracer.trace(model, (x,), capture=tracer.CaptureOptions(kernel="python"))
    plain = tracer.trace(model, (x,))
    assert model.seen == ["python", default] and kernel.current() == default  # held for that capture only
    assert in_python.provenance["options"]["kernel"] == "python" and "kernel" not in plain.provenance["options"]
    assert [(op.label, op.kind, op.parents) for op in in_python.ops] == [(op.label, op.kind, op.parents)
                                                                         for op in plain.ops]
    with pytest.raises(tracer.errors.InvalidInputError, match="kernel must be"):
        tracer.CaptureOptions(kernel="cython")
    if not native.ACTIVE:
        with pytest.raises(tracer.errors.InvalidInputError, match="not active"):
            tracer.trace(model, (x,), capture=tracer.CaptureOptions(kernel="c"))
    else:
        assert tracer.trace(model, (x,), capture=tracer.CaptureOptions(kernel="c")).provenance["options"]["kernel"] == "c"
