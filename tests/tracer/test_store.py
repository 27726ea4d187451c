"""Save/load: lossless round trips; truncated, tampered and foreign files refuse typed."""
from __future__ import annotations

import json

import pytest
import torch

import tracer
from tests.models import tiny_gpt2
from tracer import errors
from tracer.store import SCHEMA_VERSION, STRUCTURE_FILE, VALUES_FILE


@pytest.fixture(scope="module")
def gpt2_trace():
    m = tiny_gpt2()
    return tracer.trace(m, (torch.randint(0, 100, (1, 6), generator=torch.Generator().manual_seed(0)),))


def assert_traces_equal(a, b):
    assert a.ops == b.ops
    assert a.modules == b.modules
    assert a.params == b.params
    assert a.model_class == b.model_class
    assert a.provenance == b.provenance
    assert a.warnings == b.warnings
    assert a.values.keys() == b.values.keys()
    for k in a.values:
        assert a.values[k].dtype == b.values[k].dtype and torch.equal(a.values[k], b.values[k]), k


def test_round_trip_is_lossless(gpt2_trace, tmp_path):
    gpt2_trace.save(tmp_path / "t")
    loaded = tracer.load(tmp_path / "t")
    assert_traces_equal(gpt2_trace, loaded)
    assert loaded.output is None and loaded.live_calls == {}  # live objects are never persisted
    # saving the loaded trace again gives the identical file
    loaded.save(tmp_path / "again")
    assert (tmp_path / "t" / STRUCTURE_FILE).read_bytes() == (tmp_path / "again" / STRUCTURE_FILE).read_bytes()
    assert tracer.load(tmp_path / "t" / STRUCTURE_FILE).ops == gpt2_trace.ops


def test_structure_only_save_has_no_values_file(gpt2_trace, tmp_path):
    m = tiny_gpt2()
    t = tracer.trace(m, (torch.randint(0, 100, (1, 3)),), capture=tracer.CaptureOptions(save="none"))
    t.save(tmp_path / "s")
    assert not (tmp_path / "s" / VALUES_FILE).exists()
    assert_traces_equal(t, tracer.load(tmp_path / "s"))


def _saved(trace, tmp_path):
    return trace.save(tmp_path / "x")


def test_missing_and_truncated(gpt2_trace, tmp_path):
    with pytest.raises(errors.TraceFileNotFoundError) as e:
        tracer.load(tmp_path / "nowhere")
    assert e.value.code == "trace_file_missing"
    folder = _saved(gpt2_trace, tmp_path)
    data = (folder / STRUCTURE_FILE).read_bytes()
    (folder / STRUCTURE_FILE).write_bytes(data[: len(data) // 2])
    with pytest.raises(errors.TraceFileCorruptError) as e:
        tracer.load(folder)
    assert e.value.code == "trace_file_corrupt" and e.value.site.endswith(STRUCTURE_FILE)


def test_tampered_structure_refuses(gpt2_trace, tmp_path):
    folder = _saved(gpt2_trace, tmp_path)
    doc = json.loads((folder / STRUCTURE_FILE).read_text())
    doc["trace"]["ops"]["out"]["table"][-1]["shape"][0] = 99
    (folder / STRUCTURE_FILE).write_text(json.dumps(doc))
    with pytest.raises(errors.TraceFileTamperedError) as e:
        tracer.load(folder)
    assert e.value.code == "trace_digest_mismatch"


def test_tampered_values_refuse(gpt2_trace, tmp_path):
    folder = _saved(gpt2_trace, tmp_path)
    raw = bytearray((folder / VALUES_FILE).read_bytes())
    raw[-5] ^= 0xFF
    (folder / VALUES_FILE).write_bytes(bytes(raw))
    with pytest.raises(errors.TraceFileTamperedError):
        tracer.load(folder)
    (folder / VALUES_FILE).unlink()
    with pytest.raises(errors.TraceFileCorruptError):
        tracer.load(folder)


def test_foreign_and_future_files_refuse(gpt2_trace, tmp_path):
    folder = tmp_path / "foreign"
    folder.mkdir()
    (folder / STRUCTURE_FILE).write_text(json.dumps({"graphs": []}))
    with pytest.raises(errors.TraceSchemaError) as e:
        tracer.load(folder)
    assert e.value.code == "trace_schema_unsupported"
    real = _saved(gpt2_trace, tmp_path)
    doc = json.loads((real / STRUCTURE_FILE).read_text())
    doc["schema_version"] = 999
    (real / STRUCTURE_FILE).write_text(json.dumps(doc))
    with pytest.raises(errors.TraceSchemaError):
        tracer.load(real)


def test_consistent_but_broken_graph_refuses(gpt2_trace, tmp_path):
    """A file whose digest was recomputed after an edit still fails the graph checks."""
    from tracer.store import _digest

    folder = _saved(gpt2_trace, tmp_path)
    doc = json.loads((folder / STRUCTURE_FILE).read_text())
    doc["trace"]["ops"]["parents"][2] = [{"source": "no_such_op", "position": "0"}]
    doc["digest"]["structure"] = _digest(doc["trace"])
    (folder / STRUCTURE_FILE).write_text(json.dumps(doc))
    with pytest.raises(errors.TraceFileCorruptError, match="no_such_op"):
        tracer.load(folder)


def test_no_pickle_in_the_package():
    import pathlib

    root = pathlib.Path(tracer.__file__).parent.parent
    for pkg in ("tracer", "exporters", "app"):
        for path in (root / pkg).rglob("*.py"):
            text = path.read_text()
            assert "import pickle" not in text and "torch.load(" not in text, path


# -- round trips across architectures, compression, values of every dtype ----------------------------
from tests.models import tiny_bert, tiny_llama, tiny_resnet  # noqa: E402
from tracer.store import STRUCTURE_FILE_GZ, save_trace  # noqa: E402


def _llama_twin_structure():
    with torch.device("meta"):
        twin = type(tiny_llama())(tiny_llama().config).eval()
    return tracer.trace(twin, (torch.zeros(1, 5, dtype=torch.long, device="meta"),),
                        capture=tracer.CaptureOptions(structure_only=True))


ROUND_TRIPS = {
    "llama": lambda: tracer.trace(tiny_llama(), (torch.randint(0, 100, (1, 5)),)),
    "bert": lambda: tracer.trace(tiny_bert(), (torch.randint(0, 100, (1, 5)),)),
    "resnet": lambda: tracer.trace(tiny_resnet(), (torch.randn(1, 3, 16, 16),)),
    "llama-structure-only": _llama_twin_structure,
}


@pytest.mark.parametrize("name", sorted(ROUND_TRIPS))
@pytest.mark.parametrize("compress", [False, True])
def test_round_trip_across_architectures(name, compress, tmp_path):
    t = ROUND_TRIPS[name]()
    folder = save_trace(t, tmp_path / name, compress=compress)
    assert (folder / (STRUCTURE_FILE_GZ if compress else STRUCTURE_FILE)).is_file()
    loaded = tracer.load(folder)
    assert_traces_equal(t, loaded)
    if t.envelope is not None:  # the envelope comes back verified and reset to HYPOTHESIS
        assert loaded.envelope.claims == t.envelope.claims and loaded.ladder_state == "HYPOTHESIS"


def test_values_of_every_dtype_and_layout_round_trip(gpt2_trace, tmp_path):
    """Scalars, empty, non-contiguous, bf16, bool, fp8, complex: written in blocks, read back exactly."""
    from tracer.store.values import read_values, write_values

    g = torch.Generator().manual_seed(0)
    values = {
        "a": torch.randn(3, 4, generator=g), "b": torch.randn(3, 4, generator=g).t(), "c": torch.tensor(2.5),
        "d": torch.zeros(0, 5), "e": torch.randn(2, 3, generator=g).to(torch.bfloat16),
        "f": torch.rand(4, generator=g) > 0.5, "g": torch.arange(7), "h": torch.randn(5, generator=g).to(torch.float8_e4m3fn),
        "i": torch.randn(3, dtype=torch.complex64, generator=g), "j": torch.randint(0, 255, (3, 1), dtype=torch.uint8),
        "k": torch.randn(2, 3, dtype=torch.float16, generator=g), "l": torch.randn(3, 4, generator=g),
    }
    metas = {k: tracer.TensorMeta(tuple(v.shape), str(v.dtype).replace("torch.", ""), "cpu") for k, v in values.items()}
    digest = write_values(values, tmp_path / "v.safetensors")
    back = read_values(tmp_path / "v.safetensors", digest, metas)
    assert back.keys() == values.keys()
    for k, v in values.items():
        assert back[k].dtype == v.dtype and back[k].shape == v.shape
        assert torch.equal(back[k].view(torch.uint8) if v.dtype == torch.float8_e4m3fn else back[k],
                           v.contiguous().view(torch.uint8) if v.dtype == torch.float8_e4m3fn else v), k


def test_loaded_values_start_where_a_forward_would_put_them(tmp_path):
    """Every value read back starts on a 64-byte boundary, as a fresh storage of the forward did (a kernel
    may round differently on unaligned data: MKL's sgemm did on an AVX-512 EPYC), and writing what was read
    gives the same file (copied runs are not mistaken for views of each other)."""
    from tracer.store.values import ALIGN, read_values, write_values

    g = torch.Generator().manual_seed(0)
    values = {"a": torch.randn(3, generator=g), "b": torch.randn(3, generator=g), "c": torch.randn(2, 16, generator=g),
              "d": torch.randn(5, 3, generator=g).t(), "e": torch.arange(5), "f": torch.zeros(0, 2),
              "g": torch.randn(7, dtype=torch.float16, generator=g)}
    metas = {k: tracer.TensorMeta(tuple(v.shape), str(v.dtype).replace("torch.", ""), "cpu") for k, v in values.items()}
    digest = write_values(values, tmp_path / "v.safetensors")
    back = read_values(tmp_path / "v.safetensors", digest, metas)
    for k, v in values.items():
        assert torch.equal(back[k], v) and back[k].stride() == v.stride(), k
        assert not v.numel() or back[k].data_ptr() % ALIGN == 0, k
    assert write_values(back, tmp_path / "again.safetensors") == digest


def test_values_file_is_plain_safetensors(gpt2_trace, tmp_path):
    """Our streaming writer's file loads with the safetensors library, and its files load with ours."""
    from safetensors.torch import load_file, save_file
    from tracer.store.values import read_values

    from safetensors import safe_open

    folder = _saved(gpt2_trace, tmp_path)
    theirs = load_file(str(folder / VALUES_FILE))
    with safe_open(str(folder / VALUES_FILE), "pt") as fh:  # values sharing a storage: its span, once
        views = json.loads(fh.metadata().get("views", "{}"))
    assert views  # GPT-2's q/k/v split makes non-dense views of one buffer
    spans = {owner: theirs[owner] for owner, _, _ in views.values()}
    theirs.update({k: spans[owner].as_strided(gpt2_trace.values[k].shape, stride, offset)
                   for k, (owner, offset, stride) in views.items()})
    assert theirs.keys() == gpt2_trace.values.keys()
    assert all(torch.equal(theirs[k], gpt2_trace.values[k]) for k in theirs)
    other = tmp_path / "other.safetensors"
    save_file({k: v.clone().contiguous() for k, v in gpt2_trace.values.items()}, str(other))
    import hashlib

    digest = hashlib.sha256(other.read_bytes()).hexdigest()
    ours = read_values(other, digest, {op.label: op.out for op in gpt2_trace.ops})
    assert all(torch.equal(ours[k], gpt2_trace.values[k]) for k in gpt2_trace.values)


def test_schema_1_files_refuse_with_a_remedy(gpt2_trace, tmp_path):
    folder = _saved(gpt2_trace, tmp_path)
    current = f'"schema_version":{SCHEMA_VERSION}'.encode()
    raw = (folder / STRUCTURE_FILE).read_bytes().replace(current, b'"schema_version":1', 1)
    (folder / STRUCTURE_FILE).write_bytes(raw)
    with pytest.raises(errors.TraceSchemaError, match="schema version 1") as e:
        tracer.load(folder)
    assert "again" in e.value.remedy


def test_schema_2_files_still_load(gpt2_trace, tmp_path):
    """A folder written by the previous schema (one JSON object per op) loads to the same trace."""
    import hashlib

    from tests.tracer._store_rows import op_rows

    folder = _saved(gpt2_trace, tmp_path)
    doc = json.loads((folder / STRUCTURE_FILE).read_bytes())
    doc["trace"]["ops"] = op_rows(doc["trace"])  # schema 2: every op a record with its index
    body = json.dumps(doc["trace"], separators=(",", ":")).encode()
    digests = {"structure": hashlib.sha256(body).hexdigest(), "values": doc["digest"]["values"]}
    head = json.dumps({"format": doc["format"], "schema_version": 2, "digest": digests}, separators=(",", ":"))
    (folder / STRUCTURE_FILE).write_bytes(head[:-1].encode() + b',"trace":' + body + b"}")
    old = tracer.load(folder)
    assert old.ops == gpt2_trace.ops and old.modules == gpt2_trace.modules
    assert all(torch.equal(old.values[k], gpt2_trace.values[k]) for k in gpt2_trace.values)
    resaved = old.save(tmp_path / "resaved")
    assert json.loads((resaved / STRUCTURE_FILE).read_bytes())["schema_version"] == SCHEMA_VERSION
    doc["trace"]["ops"][3]["index"] = 7  # and its checks still run
    body = json.dumps(doc["trace"], separators=(",", ":")).encode()
    digests["structure"] = hashlib.sha256(body).hexdigest()
    head = json.dumps({"format": doc["format"], "schema_version": 2, "digest": digests}, separators=(",", ":"))
    (folder / STRUCTURE_FILE).write_bytes(head[:-1].encode() + b',"trace":' + body + b"}")
    with pytest.raises(errors.TraceStructureInvalidError, match=r"ops\[3\]"):
        tracer.load(folder)


def test_structure_file_written_once_and_byte_identical(gpt2_trace, tmp_path):
    """The digest covers the body bytes as written: a resave of a loaded trace gives the same bytes."""
    a = _saved(gpt2_trace, tmp_path)
    b = tracer.load(a).save(tmp_path / "b")
    assert (a / STRUCTURE_FILE).read_bytes() == (b / STRUCTURE_FILE).read_bytes()
    assert (a / VALUES_FILE).read_bytes() == (b / VALUES_FILE).read_bytes()


def test_free_form_values_are_saved_so_that_they_load(gpt2_trace, tmp_path):
    """attrs and provenance holding NaN, huge ints, tuples, non-string keys or objects still load back."""
    import dataclasses

    odd = {"nan": float("nan"), "big": 10**30, "tuple": (1, 2), 3: "int key", "obj": object(), "ok": [1.5, None]}
    ops = tuple(dataclasses.replace(op, attrs=odd) if op.index == 3 else op for op in gpt2_trace.ops)
    t = tracer.Trace(ops=ops, modules=gpt2_trace.modules, params=gpt2_trace.params, model_class="M",
                     provenance=gpt2_trace.provenance.replace(summary=odd))
    loaded = tracer.load(t.save(tmp_path / "odd"))
    attrs = loaded.ops[3].attrs
    assert attrs["big"] == str(10**30) and attrs["tuple"] == [1, 2] and attrs["3"] == "int key"
    assert attrs["nan"] == "nan" and attrs["ok"] == [1.5, None] and loaded.provenance["summary"] == attrs


def test_a_permuted_value_comes_back_in_its_layout_and_bad_strides_refuse(tmp_path):
    """Offline replay feeds kernels the memory layout of the forward: dense permutations keep strides."""
    import json

    from tracer.store.values import read_values, write_values

    base = torch.arange(24.0).reshape(2, 3, 4)
    values = {"a_1": base.permute(2, 0, 1), "b_1": base, "c_1": base[:, :, :2]}  # permuted, contiguous, sliced
    digest = write_values(values, tmp_path / "v.safetensors")
    metas = {k: tracer.TensorMeta(tuple(v.shape), "float32", "cpu") for k, v in values.items()}
    back = read_values(tmp_path / "v.safetensors", digest, metas)
    assert back["a_1"].stride() == values["a_1"].stride() and torch.equal(back["a_1"], values["a_1"])
    assert back["b_1"].is_contiguous() and torch.equal(back["c_1"], values["c_1"])
    assert back["c_1"].stride() == values["c_1"].stride()  # a slice comes back as a view of its stored span
    raw = bytearray((tmp_path / "v.safetensors").read_bytes())
    n = int.from_bytes(raw[:8], "little")
    header = json.loads(raw[8:8 + n])
    header["__metadata__"]["strides"] = json.dumps({"a_1": [1, 1, 1]})  # overlapping: not a dense layout
    head = json.dumps(header, separators=(",", ":")).encode()
    head += b" " * (-len(head) % 8)
    forged = len(head).to_bytes(8, "little") + head + bytes(raw[8 + n:])
    (tmp_path / "f.safetensors").write_bytes(forged)
    import hashlib

    with pytest.raises(errors.TraceFileCorruptError):
        read_values(tmp_path / "f.safetensors", hashlib.sha256(forged).hexdigest(), metas)


def test_size_one_dimensions_with_any_stride_round_trip(tmp_path):
    """A permuted value whose size-1 dimension carries a large stride (as torch allows) still loads."""
    from tracer.store.values import read_values, write_values

    value = torch.arange(12.0).reshape(3, 4, 1).permute(2, 1, 0)  # shape (1, 4, 3), stride (1, 1, 4)
    odd = value.as_strided(value.shape, (999, 1, 4))  # the size-1 dimension's stride is arbitrary
    digest = write_values({"p_1": odd}, tmp_path / "v.safetensors")
    meta = {"p_1": tracer.TensorMeta(tuple(odd.shape), "float32", "cpu")}
    back = read_values(tmp_path / "v.safetensors", digest, meta)["p_1"]
    assert torch.equal(back, odd)


def test_a_one_element_value_with_an_odd_stride_saves(tmp_path):
    from tracer.store.values import read_values, write_values

    one = torch.arange(16, dtype=torch.int64).reshape(2, 8)[:1, :1].reshape(1)  # stride may be 8
    one = one.as_strided((1,), (8,))
    digest = write_values({"x_1": one}, tmp_path / "v.safetensors")
    back = read_values(tmp_path / "v.safetensors", digest, {"x_1": tracer.TensorMeta((1,), "int64", "cpu")})
    assert torch.equal(back["x_1"], one)


def test_repeated_values_are_written_once(tmp_path):
    """Schema 3: an op-dense loop's shapes, source lines, stacks and call templates are table entries,
    each op an index into them, and every column has one entry per op; the trace loads back equal."""
    class Loop(torch.nn.Module):
        def forward(self, x):
            for _ in range(100):
                x = torch.tanh(x * 0.5 + 0.1)
            return x

    t = tracer.trace(Loop(), (torch.randn(2, 4),), capture=tracer.CaptureOptions(save="none"))
    folder = t.save(tmp_path / "loop")
    columns = json.loads((folder / STRUCTURE_FILE).read_bytes())["trace"]["ops"]
    assert columns["count"] == len(t) == 302 and "index" not in columns  # input, 300 calls, output
    assert len(columns["out"]["table"]) == 1 and len(columns["source"]["table"]) <= 2
    assert len(columns["attrs"]["table"]) <= 4 and len(columns["module_stack"]["table"]) <= 2
    assert all(len(c["index"] if isinstance(c, dict) else c) == 302 for k, c in columns.items() if k != "count")
    assert "layout" not in columns and "rank" not in columns  # every op holds the default: left out
    assert tracer.load(folder).ops == t.ops
