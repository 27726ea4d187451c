"""Load-time structure checks: each case from the hardening issue (digests resealed, so only the checks
stand in the way) refuses with a typed store error; links that leave the folder are refused."""
from __future__ import annotations

import hashlib
import json
import os

import pytest
import torch

import tracer
from tests.models import tiny_gpt2
from tracer import errors
from tracer.store import STRUCTURE_FILE, VALUES_FILE
from tests.tracer._store_rows import op_rows, set_op_rows
from tracer.store.document import frame


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    t = tracer.trace(tiny_gpt2(), (torch.randint(0, 100, (1, 6), generator=torch.Generator().manual_seed(0)),))
    folder = t.save(tmp_path_factory.mktemp("store") / "t")
    return folder


def _resealed(saved, tmp_path, body_text: bytes, name="m"):
    """A copy of `saved` whose trace.json carries `body_text` under a correct structure digest."""
    folder = tmp_path / name
    folder.mkdir()
    digest = None
    if (saved / VALUES_FILE).exists():
        values = (saved / VALUES_FILE).read_bytes()
        (folder / VALUES_FILE).write_bytes(values)
        digest = hashlib.sha256(values).hexdigest()
    (folder / STRUCTURE_FILE).write_bytes(frame(body_text, digest))
    return folder


def _body(saved):
    return json.loads((saved / STRUCTURE_FILE).read_bytes())["trace"]


def _edit(saved, tmp_path, edit, raw=None):
    """`edit(body, ops)` with the ops as one dict each (`ops`), written back as columns."""
    body = _body(saved)
    ops = op_rows(body)
    edit(body, ops)
    set_op_rows(body, ops)
    text = json.dumps(body, separators=(",", ":"))
    if raw is not None:
        text = text.replace('"@RAW@"', raw)
    return _resealed(saved, tmp_path, text.encode())


def _refuses(folder, cls=errors.TraceStructureInvalidError, match=None):
    with pytest.raises(cls, match=match) as info:
        tracer.load(folder)
    assert isinstance(info.value, errors.StoreError) and info.value.code and info.value.site
    return info.value


def test_unchanged_resealed_copy_loads(saved, tmp_path):
    assert tracer.load(_edit(saved, tmp_path, lambda b, ops: None)).ops == tracer.load(saved).ops


@pytest.mark.parametrize("raw", ["Infinity", "-Infinity", "NaN", "9" * 4400, "1e400", "2.0", "true", "-1"])
def test_bad_numbers_in_integer_fields_refuse(saved, tmp_path, raw):
    def edit(b, ops):
        ops[3]["func_call_id"] = "@RAW@"
    _refuses(_edit(saved, tmp_path, edit, raw), errors.TraceFileCorruptError)


@pytest.mark.parametrize("depth", [65, 800, 1000, 5000])
def test_deep_nesting_refuses(saved, tmp_path, depth):
    def edit(b, ops):
        ops[2]["attrs"] = {"x": "@RAW@"}
    _refuses(_edit(saved, tmp_path, edit, "[" * depth + "]" * depth), errors.TraceFileCorruptError)


def test_wrong_types_refuse_with_their_path(saved, tmp_path):
    def edit(b, ops):
        ops[5]["params"] = [{"a": 1}]
    err = _refuses(_edit(saved, tmp_path, edit), match=r"ops\.params")
    assert err.code == "trace_structure_invalid"


@pytest.mark.parametrize("case", ["cycle", "unknown-child", "child-twice", "no-root", "not-sub-address", "unreachable"])
def test_module_tree_must_be_a_tree(saved, tmp_path, case):
    def edit(b, ops):
        mods = {m["address"]: m for m in b["modules"]}
        if case == "cycle":
            mods["transformer.h.0"]["children"].append("transformer")
        elif case == "unknown-child":
            mods["transformer"]["children"].append("transformer.ghost")
        elif case == "child-twice":
            mods["transformer.h.1"]["children"].append("transformer.h.0.attn")
        elif case == "no-root":
            b["modules"] = [m for m in b["modules"] if m["address"]]
        elif case == "not-sub-address":
            mods[""]["children"].append("transformer.h")
        else:
            mods["transformer"]["children"].remove("transformer.ln_f")
    _refuses(_edit(saved, tmp_path, edit))


@pytest.mark.parametrize("shape", [[-1, 6], [2**60], [1] * 70, [2**40, 2**40]])
def test_shapes_are_non_negative_and_bounded(saved, tmp_path, shape):
    def edit(b, ops):
        ops[4]["out"]["shape"] = shape
    _refuses(_edit(saved, tmp_path, edit), errors.TraceFileCorruptError)


@pytest.mark.parametrize("case", ["op-module", "stack-module", "stack-nesting", "param", "call-output", "later-parent",
                                  "output-index", "tie-self"])
def test_every_reference_resolves(saved, tmp_path, case):
    def edit(b, ops):
        op = ops[6]
        if case == "op-module":
            op["module"] = "nowhere"
        elif case == "stack-module":
            op["module_stack"][-1][0] = op["module"] = "nowhere"
        elif case == "stack-nesting":  # a call placed inside another call than elsewhere (layout needs one nesting)
            op["module_stack"] = op["module_stack"][1:]
        elif case == "param":
            op["params"] = ["ghost.weight"]
        elif case == "call-output":
            b["modules"][1]["calls"][0]["outputs"] = ["ghost_1"]
        elif case == "later-parent":
            op["parents"] = [{"source": ops[-1]["label"], "position": "0"}]
        elif case == "output-index":
            op["output_index"] = 3
        else:
            p = b["params"][0]
            p["tied"] = [p["address"]]
    _refuses(_edit(saved, tmp_path, edit))


@pytest.mark.parametrize("case", ["index-past-table", "negative-index", "short-column", "short-index", "count",
                                  "unknown-column", "missing-label", "index-column"])
def test_op_columns_must_line_up(saved, tmp_path, case):
    """Schema 3 stores ops as columns: every column has one entry per op, every index lands in its table."""
    body = _body(saved)
    columns = body["ops"]
    if case == "index-past-table":
        columns["out"]["index"][4] = len(columns["out"]["table"])
    elif case == "negative-index":
        columns["kind"]["index"][2] = -1
    elif case == "short-column":
        columns["func_call_id"].pop()
    elif case == "short-index":
        columns["source"]["index"].pop()
    elif case == "count":
        columns["count"] += 1
    elif case == "unknown-column":
        columns["colour"] = ["red"] * columns["count"]
    elif case == "missing-label":
        del columns["label"]
    else:  # the index is the op's position, never stored
        columns["index"] = list(range(columns["count"]))
    _refuses(_resealed(saved, tmp_path, json.dumps(body, separators=(",", ":")).encode()), match=r"ops")


def test_free_form_values_must_be_plain(saved, tmp_path):
    def edit(b, ops):
        b["provenance"]["x"] = "@RAW@"
    _refuses(_edit(saved, tmp_path, edit, "1" * 30), errors.TraceFileCorruptError)


def test_envelope_resealed_after_an_edit_is_checked(saved, tmp_path):
    """A forged envelope with a recomputed digest but a malformed claim table refuses typed."""
    from tests.tracer._store_fuzz import base_traces
    from tracer.digest import canonical_digest

    base = next(b for b in base_traces(tmp_path) if b.body["envelope"] is not None)
    body = json.loads(json.dumps(base.body))
    env = body["envelope"]
    env["claims"] = {"ops": {}}
    env["digest"] = canonical_digest({k: v for k, v in env.items() if k != "digest"})
    folder = tmp_path / "env"
    folder.mkdir()
    (folder / STRUCTURE_FILE).write_bytes(frame(json.dumps(body, separators=(",", ":")).encode(), None))
    with pytest.raises(errors.StoreError):
        tracer.load(folder)


# -- files -----------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", [STRUCTURE_FILE, VALUES_FILE])
def test_links_that_leave_the_folder_refuse(saved, tmp_path, name):
    folder = tmp_path / "linked"
    folder.mkdir()
    for n in (STRUCTURE_FILE, VALUES_FILE):
        (folder / n).write_bytes((saved / n).read_bytes())
    outside = tmp_path / f"outside-{name}"
    os.replace(folder / name, outside)
    os.symlink(outside, folder / name)
    err = _refuses(folder, errors.TraceFileUnsafeError)
    assert err.code == "trace_file_unsafe"


def test_links_inside_the_folder_are_followed(saved, tmp_path):
    folder = tmp_path / "inner"
    folder.mkdir()
    (folder / VALUES_FILE).write_bytes((saved / VALUES_FILE).read_bytes())
    (folder / "real.json").write_bytes((saved / STRUCTURE_FILE).read_bytes())
    os.symlink("real.json", folder / STRUCTURE_FILE)
    assert len(tracer.load(folder)) == len(tracer.load(saved))


def test_special_files_and_bad_paths_refuse(saved, tmp_path):
    folder = tmp_path / "fifo"
    folder.mkdir()
    os.mkfifo(folder / STRUCTURE_FILE)
    _refuses(folder, errors.TraceFileUnsafeError)  # never opened, so it cannot block
    loop = tmp_path / "loop"
    loop.mkdir()
    os.symlink(loop / STRUCTURE_FILE, loop / STRUCTURE_FILE)
    _refuses(loop, errors.TraceFileUnsafeError)
    for bad in (None, 3, "a\x00b", b"bytes"):
        with pytest.raises(errors.TraceFileNotFoundError):
            tracer.load(bad)


def test_values_file_damage_refuses(saved, tmp_path):
    """A resealed values file with a bad header length, dtype or byte range refuses typed."""
    values = (saved / VALUES_FILE).read_bytes()
    n = int.from_bytes(values[:8], "little")
    header = json.loads(values[8:8 + n])
    label = next(k for k in header if k != "__metadata__")
    cases = [(2**40).to_bytes(8, "little") + values[8:], values[:8 + n + 3]]
    for field, value in [("dtype", "F64"), ("shape", [-1]), ("data_offsets", [0, 2**70])]:
        h = json.loads(values[8:8 + n])
        h[label][field] = value
        head = json.dumps(h).encode()
        cases.append(len(head).to_bytes(8, "little") + head + values[8 + n:])
    body = json.loads((saved / STRUCTURE_FILE).read_bytes())["trace"]
    for i, data in enumerate(cases):
        folder = tmp_path / f"v{i}"
        folder.mkdir()
        (folder / VALUES_FILE).write_bytes(data)
        (folder / STRUCTURE_FILE).write_bytes(frame(json.dumps(body, separators=(",", ":")).encode(),
                                                    hashlib.sha256(data).hexdigest()))
        _refuses(folder, errors.TraceFileCorruptError)


class _Nest(torch.nn.Module):
    def __init__(self, depth: int) -> None:
        super().__init__()
        self.inner = _Nest(depth - 1) if depth > 1 else torch.nn.Linear(2, 2)

    def forward(self, x):
        return self.inner(x) * 1.0


def test_deep_module_trees_load_up_to_the_limit_and_refuse_beyond(tmp_path):
    """A real 150-deep nest round-trips and renders; a module chain past MAX_MODULE_DEPTH refuses typed."""
    from exporters.layout import compute_layout, default_expansion
    from tracer.store.format import MAX_MODULE_DEPTH

    t = tracer.trace(_Nest(150), (torch.randn(1, 2),), capture=tracer.CaptureOptions(save="none"))
    loaded = tracer.load(t.save(tmp_path / "nest"))
    assert len(loaded.modules) == 151 and "Linear" in loaded.summary()
    compute_layout(loaded, default_expansion(loaded))

    def chain(b, ops):
        parent = b["modules"][-1]
        for k in range(MAX_MODULE_DEPTH):
            addr = f"{parent['address']}.d{k}"
            parent["children"].append(addr)
            parent = {"address": addr, "class_name": "Deep", "params": [], "children": [], "calls": [],
                      "training": False}
            b["modules"].append(parent)
    saved = t.save(tmp_path / "nest2")
    _refuses(_edit(saved, tmp_path, chain), errors.TraceLimitError, match="deeper than")


def test_values_file_larger_than_the_trace_refuses_unread(saved, tmp_path):
    """A (sparse) 64 GiB values file is refused from its size alone: nothing is read or allocated."""
    folder = tmp_path / "big"
    folder.mkdir()
    (folder / STRUCTURE_FILE).write_bytes((saved / STRUCTURE_FILE).read_bytes())
    with open(folder / VALUES_FILE, "wb") as fh:
        fh.truncate(64 << 30)
    err = _refuses(folder, errors.TraceLimitError, match="more than the trace's recorded outputs")
    assert err.code == "trace_limit_exceeded"
