"""[issue 16] Per-rank validation of a distributed trace on a real 2-process gloo mesh.

`tracer.validate` refuses a sharded trace typed (replaying its collectives on one rank would hang);
`tracer.distributed.validate_rank` checks each collective by its recorded input and output: the
shape the group size implies, and this rank's slice of an all-gather. A zeroed gathered value and a
wrong gathered shape each fail on the op that carries them (the zeroed value also fails the replay of
the op that read it); an all-reduce is reported unchecked.
"""
from __future__ import annotations

import pytest

from tests.distributed.ranks import run_ranks

pytestmark = pytest.mark.slow


def test_validate_rank_checks_collectives_and_validate_refuses(tmp_path):
    for r in run_ranks("validation", tmp_path):
        good, bad, bad_shape = r["good"], r["bad"], r["bad_shape"]
        assert good["passed"] and good["collectives"] == 2 and good["shape_checked"] == 2
        assert good["value_checked"] == 1 and good["not_checked"] == ["collective_2"]  # the all-reduce's sum
        replayed, exact, uninitialised = r["replayed"]
        assert exact > 0 and uninitialised == 1 and replayed == exact + 1  # bit for bit; torch.empty by shape
        # the zeroed all-gather output fails its own check, and the op that read it fails replay
        assert not bad["passed"] and bad["findings"] == [[r["gathered"], "value"]] + [
            [reader, "replay"] for reader in r["gathered_readers"]]
        assert not bad_shape["passed"] and bad_shape["findings"] == [[r["gathered"], "shape"]]
        assert r["refused"]["code"] == "distributed_replay_unsupported" and r["refused"]["site"] == r["gathered"]
        assert "validate_rank" in r["refused"]["remedy"]
