"""[issue 11] Offline validation is exact: a trace saved with values, loaded in another process, validates.

The values file keeps each value's memory layout (non-dense views as their storage span, dense values
with odd strides as strides), so a kernel replays through the path it took in the forward; small
tensors inside argument tuples and Python dtypes are stored in the call template; a model's own
autograd.Function resolves only from a module the validating process already imported, or from the
caller's explicit allowlist (`tracer.offline_callables`), never by importing what a file names.
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import save_file

import tracer
from tests.tracer._offline_layout_model import Cube, build, inputs
from tracer import errors
from tracer.replay.offline import NotReplayable, OfflineCalls, resolve_callable, resolve_foreign
from tracer.store.values import MAX_SPAN_FACTOR, SPAN_SLACK, read_values, write_values

ROOT = Path(__file__).resolve().parents[2]
MODULE = "tests.tracer._offline_layout_model"

_CHILD = """
import importlib, json, sys
from safetensors.torch import load_file
import tracer
if sys.argv[3] == "import":
    importlib.import_module(sys.argv[4])  # the validating process has the model's code
trace = tracer.load(sys.argv[1])
report = tracer.validate(trace, params=load_file(sys.argv[2]))
print(json.dumps({"live_calls": len(trace.live_calls), "report": report.to_dict(),
                  "strides": {k: list(v.stride()) for k, v in trace.values.items()},
                  "imported": sys.argv[4] in sys.modules}))
"""


def _elsewhere(tmp_path: Path, imports: bool) -> tuple[tracer.Trace, dict]:
    model = build()
    t = tracer.trace(model, (inputs(),))
    assert tracer.validate(t)  # live validation passes in this process
    folder = t.save(tmp_path / "trace")
    weights = tmp_path / "weights.safetensors"
    save_file({k: v.detach().clone().contiguous() for k, v in model.state_dict().items()}, str(weights))
    out = subprocess.run([sys.executable, "-c", _CHILD, str(folder), str(weights), "import" if imports else "-",
                          MODULE], capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    return t, json.loads(out.stdout.strip().splitlines()[-1])


def test_saved_trace_validates_bit_exact_in_another_process_with_each_values_layout(tmp_path):
    t, got = _elsewhere(tmp_path, imports=True)
    report = got["report"]
    assert got["live_calls"] == 0  # replayed from the stored templates
    assert report["passed"], report["findings"]
    calls = sum(1 for op in t.ops if op.kind not in ("input", "output", "constant"))
    assert report["ops_exact"] == calls and not report["tolerances"]  # every op bit for bit, none held to a spread
    # every value comes back in the layout the forward made: slices, an expand, a step, an odd stride
    assert got["strides"] == {k: list(v.stride()) for k, v in t.values.items()}
    kinds = {tuple(v.stride()) for v in t.values.values()}
    assert (0, 1) in kinds and (48, 2) in kinds  # the expand and the strided step were exercised


def test_a_function_whose_module_is_not_imported_is_refused_typed_and_nothing_is_imported(tmp_path):
    t, got = _elsewhere(tmp_path, imports=False)
    report = got["report"]
    assert not got["imported"]  # loading and validating imported nothing the file names
    (finding,) = report["findings"]
    op = next(op for op in t.ops if op.kind == "autograd_function")
    assert finding["label"] == op.label and finding["check"] == "not_replayable_offline"
    assert f"{MODULE}.Cube" in finding["message"] and "offline_callables" in finding["message"]
    assert report["ops_exact"] == sum(1 for o in t.ops if o.kind not in ("input", "output", "constant")) - 1


def _renamed_function_trace(tmp_path: Path) -> tuple[tracer.Trace, torch.nn.Module, type]:
    """A trace whose Function is recorded under a module no process has imported."""

    class Hidden(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            return x * 2 + 1

        @staticmethod
        def backward(ctx, g):
            return g * 2

    Hidden.__module__ = "a_module_nobody_imported"

    class M(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.lin = torch.nn.Linear(4, 4)

        def forward(self, x):
            return Hidden.apply(self.lin(x))

    torch.manual_seed(0)
    model = M().eval()
    loaded = tracer.load(tracer.trace(model, (torch.randn(3, 4),)).save(tmp_path / "t"))
    return loaded, model, Hidden


def test_an_explicit_allowlist_resolves_a_function_no_module_provides(tmp_path):
    loaded, model, hidden = _renamed_function_trace(tmp_path)
    refused = tracer.validate(loaded, params=model)
    assert not refused.passed and refused.findings[0].check == "not_replayable_offline"
    assert "a_module_nobody_imported" in refused.findings[0].message
    with tracer.offline_callables(hidden):
        assert tracer.validate(loaded, params=model).passed
    assert not tracer.validate(loaded, params=model).passed  # the allowlist ends with its block
    with pytest.raises(TypeError):
        with tracer.offline_callables(print):
            pass


def test_a_file_cannot_name_arbitrary_code_to_run(tmp_path):
    """Forged names: only torch callables, registered ops and imported Function classes resolve."""
    loaded, model, _ = _renamed_function_trace(tmp_path)
    op = next(o for o in loaded.ops if o.kind == "autograd_function")
    for name in ("os.system", "subprocess.run", "builtins.eval", "tracer.load", "torch.load"):
        with pytest.raises(NotReplayable):
            resolve_foreign(dataclasses.replace(op, func=name), {})
    for path in ("os.system", "torch.ops.import_module", "torch.ops.load_library", "torch.load",
                 "torch.ops.nowhere.op.default", "torch.serialization.load"):
        with pytest.raises(NotReplayable):
            resolve_callable(path)
    forged = dataclasses.replace(op, func="os.system")
    calls = OfflineCalls(dataclasses.replace(loaded, ops=tuple(forged if o is op else o for o in loaded.ops)),
                         dict(model.named_parameters()))
    with pytest.raises(NotReplayable):
        calls.call(forged)


# -- the values file ------------------------------------------------------------------------
def _metas(values):
    return {k: tracer.TensorMeta(tuple(v.shape), str(v.dtype).replace("torch.", ""), "cpu") for k, v in values.items()}


def test_views_round_trip_as_views_and_a_far_larger_span_falls_back_to_dense(tmp_path):
    base = torch.arange(96.0).reshape(4, 3, 8)
    huge = torch.arange(float(4 * (MAX_SPAN_FACTOR * 4 + SPAN_SLACK)))  # 4 elements a quarter apart
    values = {"slice_1": base[:, :, 1:3], "expand_1": torch.arange(4.0).reshape(1, 4).expand(5, 4),
              "step_1": base[:, :, ::2], "odd_1": torch.arange(32.0).reshape(32, 1).as_strided((32, 1), (1, 32)),
              "far_1": huge[::huge.numel() // 4][:4], "perm_1": base.permute(2, 0, 1)}
    digest = write_values(values, tmp_path / "v.safetensors")
    back = read_values(tmp_path / "v.safetensors", digest, _metas(values))
    for k, v in values.items():
        assert torch.equal(back[k], v), k
    assert back["far_1"].is_contiguous()  # its span is far larger than the view: stored dense
    assert all(back[k].stride() == values[k].stride() for k in values if k != "far_1")
    with open(tmp_path / "v.safetensors", "rb") as fh:
        n = int.from_bytes(fh.read(8), "little")
        meta = json.loads(fh.read(n))["__metadata__"]
    assert meta["version"] == "2" and json.loads(meta["dense_views"]) == ["far_1"]
    views = json.loads(meta["views"])
    assert set(views) == {"slice_1", "expand_1", "step_1", "perm_1"} and set(json.loads(meta["strides"])) == {"odd_1"}
    # the slice, the step and the permutation share `base`: its 96 elements are stored once, for all three
    assert len({views[k][0] for k in ("slice_1", "step_1", "perm_1")}) == 1
    assert sorted(json.loads(meta["spans"]).values()) == [4, 96]
    assert (tmp_path / "v.safetensors").stat().st_size - 8 - n == (96 + 4 + 32 + 4) * 4


def _header(path: Path) -> dict:
    raw = path.read_bytes()
    return json.loads(raw[8:8 + int.from_bytes(raw[:8], "little")])


def _forge(path: Path, out: Path, edit) -> str:
    raw = path.read_bytes()
    n = int.from_bytes(raw[:8], "little")
    header = json.loads(raw[8:8 + n])
    edit(header["__metadata__"])
    head = json.dumps(header, separators=(",", ":")).encode()
    head += b" " * (-len(head) % 8)
    forged = len(head).to_bytes(8, "little") + head + raw[8 + n:]
    out.write_bytes(forged)
    return hashlib.sha256(forged).hexdigest()


_VIEW = ["slice_1", 0, [12, 4, 1]]


@pytest.mark.parametrize("edit,error", [
    (lambda m: m.update(version="9"), errors.TraceSchemaError),
    (lambda m: m.update(views=json.dumps({"slice_1": ["slice_1", 0, [4, 1]]})), errors.TraceFileCorruptError),  # rank
    (lambda m: m.update(views=json.dumps({"slice_1": ["slice_1", 0, [12, -4, 1]]})), errors.TraceFileCorruptError),
    (lambda m: m.update(views=json.dumps({"slice_1": ["slice_1", 0, [12, 4, 1 << 40]]})), errors.TraceFileCorruptError),
    (lambda m: m.update(views=json.dumps({"slice_1": ["slice_1", 5, [12, 4, 1]]})), errors.TraceFileCorruptError),
    (lambda m: m.update(views=json.dumps({"slice_1": _VIEW, "nowhere_1": _VIEW})), errors.TraceFileCorruptError),
    (lambda m: m.update(views=json.dumps({"slice_1": ["other_1", 0, [12, 4, 1]]})), errors.TraceFileCorruptError),
    (lambda m: m.update(spans=json.dumps({"slice_1": 30})), errors.TraceFileCorruptError),  # not the stored length
    (lambda m: m.update(spans=json.dumps({"slice_1": 22, "other_1": 5})), errors.TraceFileCorruptError),
    (lambda m: m.update(spans=json.dumps({"slice_1": 1 << 40})), errors.TraceFileCorruptError),
    (lambda m: m.update(views="{not json"), errors.TraceFileCorruptError),
    (lambda m: m.pop("spans"), errors.TraceFileCorruptError),  # the stored span no longer matches the recorded shape
])
def test_forged_view_metadata_refuses_typed(tmp_path, edit, error):
    values = {"slice_1": torch.arange(24.0).reshape(2, 3, 4)[:, :, 1:3]}
    write_values(values, tmp_path / "v.safetensors")
    assert _header(tmp_path / "v.safetensors")["__metadata__"]["views"] == json.dumps({"slice_1": _VIEW},
                                                                                   separators=(",", ":"))
    digest = _forge(tmp_path / "v.safetensors", tmp_path / "f.safetensors", edit)
    with pytest.raises(error):
        read_values(tmp_path / "f.safetensors", digest, _metas(values))


def test_a_values_file_of_version_one_still_loads(tmp_path):
    """A file without a version (the earlier writer: dense values, permutations with strides) reads as before."""
    from safetensors.torch import save_file as st_save

    values = {"a_1": torch.arange(12.0).reshape(3, 4), "b_1": torch.arange(6, dtype=torch.int64)}
    st_save(values, str(tmp_path / "v.safetensors"))
    digest = hashlib.sha256((tmp_path / "v.safetensors").read_bytes()).hexdigest()
    back = read_values(tmp_path / "v.safetensors", digest, _metas(values))
    assert all(torch.equal(back[k], v) for k, v in values.items())


def test_small_tensors_in_tuples_and_python_dtypes_are_stored_in_the_template():
    t = tracer.trace(build(), (inputs(),))
    zeros = next(op for op in t.ops if op.kind == "zeros")
    (size,) = zeros.attrs["args"]
    assert size["tuple"][1] == {"tensor": None, "value": {"dtype": "int64", "shape": [], "data": [3]}}
    assert zeros.attrs["kwargs"]["dtype"] == {"pytype": "float"}
    pow_op = next(op for op in t.ops if op.kind == "pow")
    assert pow_op.attrs["call"] == "torch.Tensor.pow"  # `q ** 2` runs Tensor.__pow__, torch's wrapper of pow
    assert Cube.__module__ == MODULE


def test_a_view_stored_dense_is_disclosed_on_the_loaded_trace_once(tmp_path):
    class Sparse(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.w = torch.nn.Parameter(torch.randn(4 * (MAX_SPAN_FACTOR * 4 + SPAN_SLACK)))  # never a saved value

        def forward(self, x):
            return self.w[::self.w.numel() // 4] * x  # 4 elements a quarter of a long vector apart: too large a span

    t = tracer.trace(Sparse(), (torch.randn(4),))
    loaded = tracer.load(t.save(tmp_path / "a"))
    notes = [w for w in loaded.warnings if "stored dense" in w]
    assert len(notes) == 1 and "getitem_1" in notes[0]
    again = tracer.load(loaded.save(tmp_path / "b"))
    assert [w for w in again.warnings if "stored dense" in w] == notes  # disclosed once, not per resave
    assert not any("stored dense" in w for w in tracer.load(_views_trace_folder(tmp_path)).warnings)


def _views_trace_folder(tmp_path: Path) -> Path:
    return tracer.trace(build(), (inputs(),)).save(tmp_path / "views")
