"""Loading a trace folder: safe files, header and digests, typed decoding, structural checks, values."""
from __future__ import annotations

import dataclasses
from operator import attrgetter
from pathlib import Path
from typing import Any

from ..errors import EnvelopeTamperedError, TraceFileCorruptError, TraceFileTamperedError
from ..ir import Trace
from ..gc_policy import gc_paused
from .codec import Decoded, decode_body, provenance_from_json
from .document import unframe
from .files import as_path, checked_file, read_structure, structure_file, trace_folder
from .format import GRADS_FILE, VALUES_FILE
from .backward import read_grads
from .integrity import check_body
from .values import layout_note, read_values


def load_trace(path: str | Path) -> Trace:
    """Load and verify a trace folder (or its trace.json); anything invalid is refused with a typed StoreError."""
    with gc_paused():
        return _load(path)


def _load(path: str | Path) -> Trace:
    folder = trace_folder(as_path(path, "tracer.load"))
    structure = checked_file(folder, structure_file(folder))
    site = str(structure)
    body_bytes, digests, schema = unframe(read_structure(structure), site)
    body = decode_body(body_bytes, site, schema)
    modules, params = check_body(body.ops, body.modules, body.params, body.provenance, body.envelope, site,
                                 body.columns)
    values = _values(folder, digests.values, body.ops)
    warnings = body.warnings
    if getattr(values, "dense_views", ()):  # a layout the values file could not keep: disclosed on the trace
        note = layout_note(values.dense_views)
        warnings = warnings if note in warnings else (*warnings, note)
    trace = Trace(ops=body.ops, modules=modules, params=params, model_class=body.model_class,
                  provenance=provenance_from_json(body.provenance, site), warnings=warnings,
                  envelope=_envelope(body, site), backward=_backward(body, folder, site))
    trace.values = values
    return trace


def _backward(body: Decoded, folder: Path, site: str) -> Any:
    if body.backward is None:
        read_grads(folder, None, folder / GRADS_FILE)  # refuses a grads file no backward records
        return None
    from .backward import from_doc

    bw = from_doc(body.backward, frozenset(op.label for op in body.ops), frozenset(m.address for m in body.modules),
                  site, frozenset(p.address for p in body.params))
    grads, param_grads = read_grads(folder, body.backward.gradients, folder / GRADS_FILE)
    return dataclasses.replace(bw, grads=grads, param_grads=param_grads) if grads or param_grads else bw


def _envelope(body: Decoded, site: str) -> Any:
    if body.envelope is None:
        return None
    from ..claims import envelope_from_dict
    from ..claims.join import TABLES

    data = body.envelope
    claims, digests = data.get("claims"), data.get("claim_digests")
    if (not isinstance(claims, dict) or not isinstance(digests, dict) or not isinstance(data.get("history"), list)
            or any(not isinstance(claims.get(name), list) for name, _ in TABLES)):
        raise EnvelopeTamperedError("the evidence envelope's claim table is malformed", site=f"{site}: envelope")
    return envelope_from_dict(data)


def _values(folder: Path, expected: str | None, ops: Any) -> dict[str, Any]:
    path = folder / VALUES_FILE
    if expected is None:
        if path.exists() or path.is_symlink():
            raise TraceFileTamperedError(f"{path} is not recorded in the trace's digest", site=str(path))
        return {}
    if not (path.exists() or path.is_symlink()):
        raise TraceFileCorruptError(f"{path} is missing but the trace records saved values", site=str(path))
    return read_values(checked_file(folder, path), expected, dict(zip(map(_LABEL, ops), map(_OUT, ops))))


_LABEL, _OUT = attrgetter("label"), attrgetter("out")
