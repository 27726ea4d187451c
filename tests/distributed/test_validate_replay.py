"""[issue 16] `validate_rank` replays a sharded trace's local ops on a real 2-process gloo mesh.

The tensor-parallel MLP and tiny Llama are captured on each rank; every non-collective op is
recomputed from its saved parents (sharded parameters as this rank's local shards) and compared
bit for bit. The untouched traces pass with every local op replayed exactly (the DTensor linears
included; an op whose value was not saved is listed as such); one saved activation shifted by 1.0 fails `replay` on that op and on its readers.
"""
from __future__ import annotations

import pytest

from tests.distributed.ranks import run_ranks

pytestmark = pytest.mark.slow


def test_validate_rank_replays_local_ops_and_catches_a_tampered_value(tmp_path):
    for r in run_ranks("validation_replay", tmp_path, timeout=150):
        for name in ("mlp", "llama"):
            got = r[name]
            good, bad = got["good"], got["bad"]
            assert good["passed"], good["text"]
            # every local op replayed bit for bit, the sharded (DTensor) linears included, except the ones
            # whose value the capture did not save (a meta tensor a sharding plan makes for shape arithmetic)
            assert good["ops_replayed"] == good["ops_exact"] + good["ops_nondeterministic"] == got["local_ops"] - len(got["unsaved"])
            assert good["replay_not_checked"] == [[label, "its value was not saved"] for label in got["unsaved"]]
            assert len(got["unsaved"]) <= 1 and got["dtensor_ops"]
            assert not bad["passed"]
            failed = {label for label, check in bad["findings"] if check == "replay"}
            assert failed == {got["tampered"], *got["readers"]}, bad["text"]
