"""Saving and loading traces: a folder with `trace.json` (structure) and `values.safetensors`.

No pickle anywhere. trace.json carries a format name, a schema version and SHA-256 digests of its
structure body and of the values file. Schema 3 (written since the op-dense issue) stores the ops as
columns with tables of their repeated values (`tracer.store.columns`); schema 2 files (one JSON object
per op) still load. Loading checks the files (regular, inside the folder), the
digests, every field's type, bounds and references, and the module tree, and refuses anything else
with a typed `StoreError`. Saving writes a sibling temporary folder and swaps it in.
"""
from __future__ import annotations

from .document import canonical_body_digest
from .format import FORMAT, SCHEMA_VERSION, STRUCTURE_FILE, STRUCTURE_FILE_GZ, VALUES_FILE
from .load import load_trace
from .save import save_trace

_digest = canonical_body_digest  # the digest a tool that rewrites trace.json may record (tests reseal with it)

__all__ = ["FORMAT", "SCHEMA_VERSION", "STRUCTURE_FILE", "STRUCTURE_FILE_GZ", "VALUES_FILE", "load_trace",
           "save_trace"]
