"""[issue 16] The gathered trace has every collective the torch profiler sees, on a real 2-process gloo mesh.

Each rank captures (a) a forward issuing c10d all_reduce, broadcast, all_gather_into_tensor,
reduce_scatter_tensor, all_to_all_single and functional all_reduce / all_gather_tensor, and (b) an
FSDP2 `fully_shard` MLP, each under `torch.profiler` (CPU). The profiler records every collective
as a c10d dispatcher op (`c10d::allreduce_`, `c10d::_allgather_base_`, ...; gloo's own events are
not used: gloo runs a reduce-scatter as an all-reduce). Per rank, the gathered trace's collectives
by kind equal the profiler's c10d ops by kind, and no c10d op the profiler saw is of an unmapped kind.
"""
from __future__ import annotations

import pytest

from tests.distributed.ranks import run_ranks

pytestmark = pytest.mark.slow


def test_gathered_trace_has_every_collective_the_profiler_sees(tmp_path):
    reports = run_ranks("profiled", tmp_path, timeout=120)
    root = reports[0]
    for name, expected_kinds in (("user", {"all_reduce", "broadcast", "all_gather", "reduce_scatter", "all_to_all"}),
                                 ("fsdp", {"all_gather"})):
        for r in reports:
            seen = r[name]["profiler"]
            assert not r[name]["unknown_c10d"], r[name]["unknown_c10d"]
            assert set(seen) == expected_kinds
            assert root[name]["gathered"][str(r["rank"])] == seen, (name, r["rank"])
    assert reports[0]["user"]["profiler"]["all_reduce"] == 2 and reports[0]["user"]["profiler"]["all_gather"] == 2
