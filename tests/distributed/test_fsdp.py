"""[issue 16] FSDP2 (`fully_shard`) captured per rank on a real 2-process gloo mesh (loopback).

The plain forward runs first and then the captured one, on each rank with its own batch; FSDP's
unshard all-gathers are recorded as `collective` ops (c10d `all_gather_single`) fed by copy-in ops
that read the sharded parameters. The root unit keeps its parameters unsharded after the plain
forward (FSDP2's default for the root), so only the inner units all-gather during the capture.
A forward issues no reduce-scatter (that is the backward's, which stays refused).
"""
from __future__ import annotations

import pytest

from tests.distributed.ranks import run_batch
from tests.distributed.test_tensor_parallel import _collectives, _common, _ops

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def fsdp(tmp_path_factory) -> dict[str, list[dict]]:
    """Both scenarios' reports, from one spawn of two ranks."""
    return run_batch({"mlp": ("mlp_fsdp", {}), "llama": ("llama_fsdp", {})}, tmp_path_factory.mktemp("fsdp"))


def test_mlp_fully_shard(fsdp):
    reports = fsdp["mlp"]
    _common(reports)
    for r in reports:
        assert _collectives(r) == [("all_gather", "c10d")] * 2  # the up and down units
        gathers = _ops(r, kind="collective")
        assert [g["shape"] for g in gathers] == [[544], [528]]  # both ranks' padded shards of weight + bias
        assert gathers[0]["collective"]["payload_bytes"] == 272 * 4  # this rank's flat shard
        copy_in = _ops(r, func="torch.ops.fsdp.all_gather_copy_in")
        assert copy_in[0]["params"] == ["up.weight", "up.bias"] and copy_in[2]["params"] == ["down.weight", "down.bias"]
        assert r["params"]["up.weight"] == {**r["params"]["up.weight"], "placements": ["Shard(0)"],
                                            "global_shape": [32, 16], "local_shape": [16, 16]}
        (up,) = _ops(r, func="torch.nn.functional.linear", module="up")
        assert up["params"] == ["up.weight", "up.bias"] and up["shape"] == [4, 32]  # computes on the unsharded weight


def test_tiny_llama_fully_shard_per_layer(fsdp):
    reports = fsdp["llama"]
    _common(reports)
    for r in reports:
        assert _collectives(r) == [("all_gather", "c10d")] * 2  # one per decoder layer
        assert r["params"]["model.layers.1.mlp.up_proj.weight"]["placements"] == ["Shard(0)"]
