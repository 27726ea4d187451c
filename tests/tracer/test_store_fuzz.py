"""Fuzz: seeded mutations of real saved traces (JSON values, nesting, references, the module tree, raw
bytes, the values file, the envelope, links). Load, then summary, layout and Model Explorer export on
whatever loads, may only ever refuse with a typed TracerError. The 10,000-folder run is
tests/bench/fuzz_store.py."""
from __future__ import annotations

import collections
import os

import pytest

from tests.tracer._store_fuzz import base_traces, fuzz

N_CASES = int(os.environ.get("STORE_FUZZ_CASES", "300"))
FIRST_SEED = int(os.environ.get("STORE_FUZZ_SEED", "0"))


@pytest.mark.slow
def test_fuzzed_trace_folders_refuse_typed_or_work(tmp_path):
    outcomes = fuzz(base_traces(tmp_path), tmp_path, range(FIRST_SEED, FIRST_SEED + N_CASES))
    untyped = [f"seed {o.seed}: {o.mutation}\n{o.detail}" for o in outcomes if o.result == "untyped"]
    assert not untyped, "\n\n".join(untyped[:5])
    counts = collections.Counter(o.result for o in outcomes)
    # the sample exercises both sides: many refusals, and mutated traces that still load and render
    assert counts["refused"] >= N_CASES // 3 and counts["loaded"] >= N_CASES // 20, counts
    codes = {o.detail.split(": ", 1)[1] for o in outcomes if o.result == "refused"}
    assert {"trace_structure_invalid", "trace_limit_exceeded", "trace_file_corrupt", "trace_digest_mismatch"} <= codes
