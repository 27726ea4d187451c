"""[issue 16] Collectives a capture cannot record are refused typed, on a real 2-process gloo mesh.

`all_reduce(async_op=True)` (its result is written at Work.wait(), unseen), list-form `all_gather` and
`all_to_all` (results in Python lists) and point-to-point `send`/`recv` inside a captured forward
raise `distributed_capture_unsupported` naming the call, with the tensor-form or functional remedy,
before the call runs on any rank; afterwards no function mode is left and the group still works.
"""
from __future__ import annotations

import pytest

from tests.distributed.ranks import run_ranks

pytestmark = pytest.mark.slow


def test_async_list_and_p2p_collectives_refuse_typed(tmp_path):
    for r in run_ranks("refused_collectives", tmp_path):
        expected = {"async": ("all_reduce", "async_collective", "async_op=False"),
                    "all_gather": ("all_gather", "list_or_p2p_collective", "all_gather_into_tensor"),
                    "all_to_all": ("all_to_all", "list_or_p2p_collective", "all_to_all_single"),
                    "send": ("send" if r["rank"] == 0 else "recv", "list_or_p2p_collective", "a collective")}
        for kind, (name, state, remedy) in expected.items():
            got = r[kind]
            assert got is not None, kind
            assert got["code"] == "distributed_capture_unsupported" and got["state"] == state
            assert got["site"] == f"torch.distributed.{name}" and remedy in got["remedy"]
        assert r["modes_left"] == 0 and r["group_works"]
