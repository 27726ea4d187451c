"""The trace folder format: file names, format tag, schema version and the limits a loader enforces."""
from __future__ import annotations

FORMAT = "torchlens-explore.trace"
SCHEMA_VERSION = 3  # 3: ops as columns (tracer.store.columns); 2: one JSON object per op
READABLE_SCHEMA_VERSIONS = frozenset({2, SCHEMA_VERSION})
STRUCTURE_FILE = "trace.json"
STRUCTURE_FILE_GZ = "trace.json.gz"
VALUES_FILE = "values.safetensors"
GRADS_FILE = "grads.safetensors"  # a backward's gradients (tracer.store.backward)
TRACE_FILES = frozenset({STRUCTURE_FILE, STRUCTURE_FILE_GZ, VALUES_FILE, GRADS_FILE})

# Limits: far above any real model, low enough that summary, layout and export stay bounded.
MAX_STRUCTURE_BYTES = 4 << 30  # trace.json (decompressed)
MAX_VALUES_HEADER_BYTES = 256 << 20  # the safetensors JSON header
MAX_JSON_DEPTH = 64  # nesting inside free-form values (attrs, provenance, envelope)
MAX_MODULE_DEPTH = 512  # module tree depth and module_stack length (summary and layout recurse by depth)
MAX_DIMS = 64
MAX_DIM = 1 << 48
MAX_NUMEL = 1 << 56
MAX_INT = (1 << 53) - 1  # counters and indices (exact in a float)
MAX_JSON_INT = 1 << 64  # integers in free-form values (covers int64 and uint64)
