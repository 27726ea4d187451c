"""[issue 16] `tracer.distributed.gather` on a real 2-process gloo mesh: one Trace of both ranks on rank 0.

The tensor-parallel MLP is captured on each rank and gathered (a collective; structure travels as the
trace JSON in a byte tensor). Rank 0 gets every op with its rank, the all-reduce on each rank joined
to the other rank's input by a cross-rank edge, identical ranks folded ("x 2 ranks"), and the
gathered trace saves and loads like any other; rank 1 gets None.
"""
from __future__ import annotations

import pytest

from tests.distributed.ranks import run_ranks

pytestmark = pytest.mark.slow


def test_gather_joins_ranks_at_their_collectives(tmp_path):
    root, other = run_ranks("gathered_tp", tmp_path)
    assert other == {"rank": 1, "gathered": True}  # None off the destination rank
    ops = root["ops"]
    assert len(ops) == 2 * root["local_ops"] and {o["rank"] for o in ops} == {0, 1}
    assert all(o["label"].startswith(f"r{o['rank']}.") for o in ops)
    seen = set()
    for o in ops:  # every parent precedes its reader in the merged order
        assert all(src in seen for src, _pos in o["parents"]), o
        seen.add(o["label"])
    by_label = {o["label"]: o for o in ops}
    for rank, peer in ((0, 1), (1, 0)):
        coll = by_label[f"r{rank}.collective_1"]
        assert coll["kind"] == "collective"
        assert [f"r{peer}.linear_2", f"rank{peer}.0"] in coll["parents"]  # the cross-rank edge
        assert [f"r{rank}.linear_2", "0"] in coll["parents"]
    assert root["matched"] == 1
    assert root["groups"] == [{"ranks": [0, 1], "label": "x 2 ranks"}]
    assert root["folded_ops"] == root["local_ops"] and root["folded_ranks"] == [0]
    assert root["roundtrip_equal"]
