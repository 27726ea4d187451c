"""Seeded mutations of saved trace folders, and the pipeline run on each (shared by the fuzz test and
tests/bench/fuzz_store.py).

Each mutation edits a real saved trace (JSON values, nesting, references, the module tree, raw bytes,
the values file, links) and, most of the time, reseals the digests so the edit reaches the structure
checks instead of stopping at a digest. `run_case` loads the folder and, when it loads, renders the
summary, the default layout and the Model Explorer graph; any exception that is not a TracerError is
reported as untyped.
"""
from __future__ import annotations

import json
import os
import random
import shutil
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import torch

import tracer
from tests.tracer._store_rows import op_rows, set_op_rows
from tracer.digest import canonical_digest
from tracer.errors import TracerError
from tracer.store import STRUCTURE_FILE, VALUES_FILE
from tracer.store.document import frame

RAW = "\x00raw:"  # a string marking a raw JSON token spliced in after encoding (Infinity, huge numbers, deep nests)


@dataclass
class Base:
    """One saved real trace, decoded: its body as plain JSON and its values file bytes (or None)."""

    name: str
    body: dict
    values: bytes | None


@dataclass
class Outcome:
    """What one mutated folder did: `loaded`, `refused` (with its code) or `untyped` (with the traceback)."""

    seed: int
    mutation: str
    result: str
    detail: str


def base_traces(workdir: Path) -> list[Base]:
    """Three small real traces: GPT-2 with values, a structure-only Llama twin (with envelope), a ResNet."""
    from tests.models import tiny_gpt2, tiny_llama, tiny_resnet

    ids = torch.randint(0, 100, (1, 6), generator=torch.Generator().manual_seed(0))
    with torch.device("meta"):
        twin = type(tiny_llama())(tiny_llama().config).eval()
    traces = {
        "gpt2": tracer.trace(tiny_gpt2(), (ids,)),
        "llama-structure": tracer.trace(twin, (ids.to("meta"),), capture=tracer.CaptureOptions(structure_only=True)),
        "resnet": tracer.trace(tiny_resnet(), (torch.randn(1, 3, 16, 16, generator=torch.Generator().manual_seed(0)),)),
    }
    bases = []
    for name, t in traces.items():
        folder = t.save(workdir / f"base-{name}")
        doc = json.loads((folder / STRUCTURE_FILE).read_bytes())
        values = (folder / VALUES_FILE).read_bytes() if (folder / VALUES_FILE).exists() else None
        bases.append(Base(name, doc["trace"], values))
    return bases


# -- JSON helpers ----------------------------------------------------------------------------
def _encode(value: Any) -> bytes:
    """Compact JSON with RAW-marked strings replaced by their raw token."""
    text = json.dumps(value, separators=(",", ":"), allow_nan=True)
    if RAW not in text:
        return text.encode()
    parts = text.split(json.dumps(RAW)[:-1])  # '"\u0000raw:'
    out = [parts[0]]
    for part in parts[1:]:
        token, rest = part.split('"', 1)
        out.append(token + rest)
    return "".join(out).encode()


def _paths(value: Any, prefix: tuple = (), limit: int = 4000) -> list[tuple]:
    """Paths to every node of a JSON tree (breadth first, capped)."""
    found, queue = [], [(prefix, value)]
    while queue and len(found) < limit:
        path, node = queue.pop(0)
        found.append(path)
        items = node.items() if isinstance(node, dict) else enumerate(node) if isinstance(node, list) else ()
        queue.extend((path + (k,), v) for k, v in items)
    return found


def _get(root: Any, path: tuple) -> Any:
    for key in path:
        root = root[key]
    return root


def _set(root: Any, path: tuple, value: Any) -> None:
    _get(root, path[:-1])[path[-1]] = value


def _pick_path(rng: random.Random, body: dict, under: str | None = None) -> tuple:
    start = (under,) if under else ()
    paths = [p for p in _paths(_get(body, start), start) if p]
    return rng.choice(paths) if paths else start


# -- mutations (each: rng, body, values -> description; edits body in place, may return new values) --
NASTY_VALUES: list[tuple[str, Any]] = [
    ("Infinity", RAW + "Infinity"), ("-Infinity", RAW + "-Infinity"), ("NaN", RAW + "NaN"),
    ("4300-digit int", RAW + "9" * 4400), ("2**64", 2**64), ("2**63", 2**63), ("-1", -1), ("-2**63", -2**63),
    ("1e308", 1e308), ("1e400", RAW + "1e400"), ("0.5", 0.5), ("true", True), ("null", None), ("''", ""),
    ("long string", "x" * 100_000), ("markup", "<img src=x onerror=alert(1)>"), ("dict", {"a": 1}), ("[]", []),
    ("[[1]]", [[1]]), ("{}", {}), ("list of dicts", [{"x": 1}]), ("-0", 0), ("1e18", 10**18),
]


def m_value(rng, body, values):
    path = _pick_path(rng, body, rng.choice([None, "ops", "modules", "params", "provenance", "envelope"]))
    name, value = rng.choice(NASTY_VALUES)
    if path:
        _set(body, path, value)
    return f"value {name} at {'/'.join(map(str, path))}"


def m_deep(rng, body, values):
    depth = rng.choice([70, 200, 800, 1000, 1100, 3000])
    path = _pick_path(rng, body, rng.choice(["ops", "provenance", "envelope", "modules"]))
    if path:
        _set(body, path, RAW + "[" * depth + "1" + "]" * depth)
    return f"nested {depth} deep at {'/'.join(map(str, path))}"


def m_drop_key(rng, body, values):
    dicts = [p for p in _paths(body) if isinstance(_get(body, p), dict) and _get(body, p)]
    path = rng.choice(dicts)
    key = rng.choice(sorted(_get(body, path)))
    del _get(body, path)[key]
    return f"drop key {'/'.join(map(str, path + (key,)))}"


def m_add_key(rng, body, values):
    dicts = [p for p in _paths(body) if isinstance(_get(body, p), dict)]
    path = rng.choice(dicts)
    _get(body, path)[rng.choice(["extra", "__proto__", "index", ""])] = rng.choice([1, "x", None, []])
    return f"add key at {'/'.join(map(str, path))}"


def m_list(rng, body, values):
    lists = [p for p in _paths(body) if isinstance(_get(body, p), list) and _get(body, p)]
    path = rng.choice(lists)
    items = _get(body, path)
    how = rng.choice(["drop", "duplicate", "swap", "reverse", "empty"])
    i, j = rng.randrange(len(items)), rng.randrange(len(items))
    if how == "drop":
        del items[i]
    elif how == "duplicate":
        items.insert(j, json.loads(json.dumps(items[i])))
    elif how == "swap":
        items[i], items[j] = items[j], items[i]
    elif how == "reverse":
        items.reverse()
    else:
        items.clear()
    return f"list {how} at {'/'.join(map(str, path))}"


def m_reference(rng, body, values):
    """Point a reference somewhere it should not: unknown names, later ops, cycles in the module tree."""
    ops = op_rows(body)
    how = rng.choice(["child-cycle", "child-unknown", "child-root", "child-twice", "module-unknown", "stack-unknown",
                      "parent-later", "parent-unknown", "param-unknown", "call-output-unknown", "tie-self",
                      "drop-root", "stack-deep", "module-chain"])
    _reference(rng, body, ops, how)
    set_op_rows(body, ops)
    return f"reference {how}"


def _reference(rng, body, ops, how):
    addrs = [m["address"] for m in body["modules"]] or [""]
    labels = [o["label"] for o in ops]
    mods = body["modules"]
    op = rng.choice(ops)
    mod = rng.choice(mods)
    if how == "child-cycle" and mod["children"]:
        child = next(m for m in mods if m["address"] == mod["children"][0])
        child["children"].append(mod["address"])
    elif how == "child-unknown":
        mod["children"].append(mod["address"] + ".ghost" if mod["address"] else "ghost")
    elif how == "child-root":
        mod["children"].append("")
    elif how == "child-twice" and len(mods) > 2:
        other = rng.choice(mods)
        other["children"].append(rng.choice(addrs[1:]))
    elif how == "module-unknown":
        op["module"] = "nowhere"
    elif how == "stack-unknown":
        op["module_stack"] = [["nowhere", 0]]
        op["module"], op["module_call"] = "nowhere", 0
    elif how == "parent-later":
        op["parents"] = [{"source": labels[-1], "position": "0"}]
    elif how == "parent-unknown":
        op["parents"] = [{"source": "ghost_1", "position": "0"}]
    elif how == "param-unknown":
        op["params"] = ["ghost.weight"]
    elif how == "call-output-unknown" and mod["calls"]:
        mod["calls"][0]["outputs"] = ["ghost_1"]
    elif how == "tie-self" and body["params"]:
        p = rng.choice(body["params"])
        p["tied"] = [p["address"]]
    elif how == "drop-root":
        body["modules"] = [m for m in mods if m["address"]]
    elif how == "stack-deep":
        op["module_stack"] = [[mod["address"], 0]] * rng.choice([600, 2000])
        op["module"], op["module_call"] = mod["address"], 0
    elif how == "module-chain":  # a legal-looking but very deep module tree
        depth = rng.choice([100, 600, 1200])
        parent = mods[0]
        for k in range(depth):
            addr = f"{parent['address']}.d{k}" if parent["address"] else f"d{k}"
            parent["children"].append(addr)
            parent = {"address": addr, "class_name": "Deep", "params": [], "children": [], "calls": [],
                      "training": False}
            mods.append(parent)
        op["module_stack"] = [[m["address"], 0] for m in mods[-min(depth, 400):]]
        op["module"], op["module_call"] = op["module_stack"][-1][0], 0


def m_shape(rng, body, values):
    """Shapes: negative, huge, too many dims, wrong types; in ops or params."""
    ops = op_rows(body)
    target = rng.choice([o for o in ops if o.get("out")] + body["params"])
    shape = target["out"]["shape"] if "out" in target else target["shape"]
    how = rng.choice(["negative", "huge", "dims", "float", "string", "numel", "empty"])
    if how == "negative" and shape:
        shape[0] = -rng.choice([1, 5, 2**40])
    elif how == "huge" and shape:
        shape[-1] = 2**62
    elif how == "dims":
        shape.extend([1] * 70)
    elif how == "float" and shape:
        shape[0] = 2.0
    elif how == "string" and shape:
        shape[0] = "2"
    elif how == "numel":
        shape[:] = [2**40, 2**40]
    else:
        shape.clear()
    set_op_rows(body, ops)
    return f"shape {how}"


def m_column(rng, body, values):
    """The op columns (schema 3): an index past its table or negative, a column one short or long, the count."""
    columns = body["ops"]
    name = rng.choice(sorted(k for k in columns if k != "count"))
    column = columns[name]
    entries = column["index"] if isinstance(column, dict) else column
    how = rng.choice(["past-table", "negative", "short", "long", "count", "null-column"])
    if how == "past-table" and isinstance(column, dict) and entries:
        entries[rng.randrange(len(entries))] = len(column["table"]) + rng.choice([0, 1, 2**40])
    elif how == "negative" and isinstance(column, dict) and entries:
        entries[rng.randrange(len(entries))] = -1
    elif how == "short" and entries:
        entries.pop()
    elif how == "long":
        entries.append(entries[0] if entries else 0)
    elif how == "count":
        columns["count"] = rng.choice([0, -1, columns["count"] + 1, 2**60])
    else:
        columns[name] = None
    return f"column {name} {how}"


def m_bytes(rng, body, values):
    """Raw byte damage to the structure body (returned as bytes, resealed or not by the caller)."""
    raw = bytearray(_encode(body))
    how = rng.choice(["truncate", "flip", "insert", "utf8"])
    i = rng.randrange(len(raw))
    if how == "truncate":
        del raw[i:]
    elif how == "flip":
        raw[i] ^= 1 << rng.randrange(8)
    elif how == "insert":
        raw[i:i] = rng.choice([b"{", b"]", b",", b'"', b"\\", b"\x00", b"1e999"])
    else:
        raw[i:i] = b"\xff\xfe"
    return f"bytes {how} at {i}", bytes(raw)


def m_values(rng, body, values):
    """Damage to values.safetensors: header length, header JSON, data bytes, length."""
    if values is None:
        return "values (none in this trace)", None
    raw = bytearray(values)
    n = int.from_bytes(raw[:8], "little")
    how = rng.choice(["header-len", "header-json", "data-flip", "truncate", "append", "header-edit", "empty"])
    if how == "header-len":
        raw[:8] = rng.choice([0, 1, n - 3, n + 8, 2**40, 2**64 - 1]).to_bytes(8, "little")
    elif how == "header-json":
        raw[8 + rng.randrange(n)] = ord(rng.choice('{}[]",:x0'))
    elif how == "data-flip" and len(raw) > 8 + n:
        raw[rng.randrange(8 + n, len(raw))] ^= 0xFF
    elif how == "truncate":
        del raw[rng.randrange(len(raw)):]
    elif how == "append":
        raw += b"\x00" * rng.choice([1, 8, 64])
    elif how == "header-edit":
        header = json.loads(bytes(raw[8:8 + n]))
        label = rng.choice([k for k in header if k != "__metadata__"])
        field, value = rng.choice([("dtype", "F64"), ("dtype", "X9"), ("dtype", 3), ("shape", [-1, 4]),
                                   ("shape", [2**40]), ("data_offsets", [0, 0]), ("data_offsets", [-8, 0]),
                                   ("data_offsets", [0, 2**70]), ("data_offsets", "x"), ("extra", 1)])
        header[label][field] = value
        if rng.random() < 0.3:
            header["ghost_1"] = dict(header[label])
        head = json.dumps(header).encode()
        raw = bytearray(len(head).to_bytes(8, "little") + head + bytes(raw[8 + n:]))
    else:
        raw = bytearray()
    return f"values {how}", bytes(raw)


def m_envelope(rng, body, values):
    """Edit the evidence envelope and reseal its own digest (only the structure checks stand in the way)."""
    env = body.get("envelope")
    if not isinstance(env, dict):
        return m_value(rng, body, values)
    how = rng.choice(["ladder", "claims-type", "claims-row", "history", "twin", "drop-field", "digests"])
    if how == "ladder":
        env["ladder_state"] = rng.choice(["CORROBORATED", "REFUTED", "", 3, None])
    elif how == "claims-type":
        env["claims"] = rng.choice([[], "x", {"ops": {}}, {"ops": [], "params": []}])
    elif how == "claims-row" and env["claims"]["ops"]:
        env["claims"]["ops"][0] = rng.choice([None, [], "x", [1, 2]])
    elif how == "history":
        env["history"] = rng.choice([{}, "x", [None]])
    elif how == "twin":
        env["twin"] = rng.choice([None, [], {"inputs": "x"}])
    elif how == "drop-field":
        env.pop(rng.choice(sorted(env)), None)
    else:
        env["claim_digests"] = rng.choice([[], {"ops": 1}])
    if rng.random() < 0.8:
        env["digest"] = canonical_digest({k: v for k, v in env.items() if k != "digest"})
    return f"envelope {how}"


MUTATIONS: list[tuple[str, Callable, int]] = [
    ("value", m_value, 5), ("deep", m_deep, 2), ("drop_key", m_drop_key, 2), ("add_key", m_add_key, 1),
    ("list", m_list, 3), ("reference", m_reference, 5), ("shape", m_shape, 3), ("bytes", m_bytes, 2),
    ("values", m_values, 3), ("envelope", m_envelope, 2), ("column", m_column, 2),
]


def mutate_folder(rng: random.Random, base: Base, folder: Path) -> str:
    """Write a mutated copy of `base` into `folder`; returns a description of what was done."""
    body = json.loads(json.dumps(base.body))
    values = base.values
    names = [m[0] for m in MUTATIONS]
    weights = [m[2] for m in MUTATIONS]
    steps = []
    raw_body: bytes | None = None
    for _ in range(1 if rng.random() < 0.7 else rng.randint(2, 3)):
        name = rng.choices(names, weights)[0]
        fn = MUTATIONS[names.index(name)][1]
        try:
            result = fn(rng, body, values)
        except (KeyError, IndexError, TypeError, AttributeError, ValueError, OverflowError, StopIteration):
            steps.append(f"{name} (not applicable after the previous edit)")  # the mutator, not the store, gave up
            continue
        if isinstance(result, tuple):
            desc, new = result
            if fn is m_bytes:
                raw_body = new
            else:
                values = new
        else:
            desc = result
        steps.append(desc)
    folder.mkdir(parents=True)
    reseal = rng.random() < 0.85
    if values is not None:
        (folder / VALUES_FILE).write_bytes(values)
    values_digest = _sha(values) if values is not None and reseal else _sha(base.values) if base.values else None
    body_bytes = raw_body if raw_body is not None else _encode(body)
    doc = frame(body_bytes, values_digest)
    if not reseal:
        doc = doc.replace(b'"structure":"', b'"structure":"0', 1)
    (folder / STRUCTURE_FILE).write_bytes(doc)
    if rng.random() < 0.03:
        steps.append(_link_out(rng, folder))
    return "; ".join(steps) + ("" if reseal else " (digests not resealed)")


def _link_out(rng: random.Random, folder: Path) -> str:
    """Replace one trace file by a link that leaves the folder (to a copy of itself just outside)."""
    name = rng.choice([STRUCTURE_FILE, VALUES_FILE])
    target = folder / name
    if not target.exists():
        return "link (no file)"
    outside = folder.parent / f"{folder.name}-outside-{name}"
    shutil.move(str(target), outside)
    os.symlink(outside, target)
    return f"link {name} out of the folder"


def _sha(data: bytes) -> str:
    import hashlib

    return hashlib.sha256(data).hexdigest()


def run_case(folder: Path) -> tuple[str, str]:
    """Load `folder` and, if it loads, summarize, lay out and export it: ("loaded"|"refused"|"untyped", detail)."""
    from exporters.layout import compute_layout, default_expansion
    from exporters.model_explorer import to_graph_collection

    stage = "load"
    try:
        trace = tracer.load(str(folder))
        stage = "summary"
        trace.summary()
        stage = "layout"
        compute_layout(trace, default_expansion(trace))
        stage = "model_explorer"
        to_graph_collection(trace)
    except TracerError as exc:
        return "refused", f"{stage}: {exc.code}"
    except Exception:  # noqa: BLE001 - the point: anything untyped is a finding
        return "untyped", f"{stage}: {traceback.format_exc(limit=-3)}"
    return "loaded", ""


def fuzz(bases: list[Base], workdir: Path, seeds: range, on_case: Callable[[Outcome], None] | None = None
         ) -> list[Outcome]:
    """Run one mutated folder per seed (folders are removed after use); returns every outcome."""
    outcomes = []
    for seed in seeds:
        rng = random.Random(seed)
        base = bases[seed % len(bases)]
        folder = workdir / f"case-{seed}"
        mutation = mutate_folder(rng, base, folder)
        result, detail = run_case(folder)
        outcome = Outcome(seed, f"{base.name}: {mutation}", result, detail)
        outcomes.append(outcome)
        if on_case is not None:
            on_case(outcome)
        for path in workdir.glob(f"case-{seed}*"):
            shutil.rmtree(path) if path.is_dir() and not path.is_symlink() else path.unlink()
    return outcomes
