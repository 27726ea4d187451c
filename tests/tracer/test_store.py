"""Save/load: lossless round trips; truncated, tampered and foreign files refuse typed."""
from __future__ import annotations

import json

import pytest
import torch

import tracer
from tests.models import tiny_gpt2
from tracer import errors
from tracer.store import STRUCTURE_FILE, VALUES_FILE


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
    doc["trace"]["ops"][3]["out"]["shape"][0] = 99
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
    doc["trace"]["ops"][2]["parents"] = [{"source": "no_such_op", "position": "0"}]
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
