"""[issue 16] Per-rank capture on a real 2-process gloo mesh (loopback): tensor parallel and user collectives.

The two-rank scenarios run in turn in one spawn of two processes (tests/distributed/workers.py, one
process group), bounded in time, and each test reads its scenario's reports; the four-rank one spawns
its own. On every rank the capture's output equals the plain distributed forward bit for bit, layouts
and collectives are on the ops, and a save/load round trip keeps them.
"""
from __future__ import annotations

import pytest

from tests.distributed.ranks import run_batch, run_ranks

pytestmark = pytest.mark.slow

TWO_RANKS = {"mlp_tp": ("mlp_tp", {}), "mlp_sequence_parallel": ("mlp_sequence_parallel", {}),
             "mlp_user_collectives": ("mlp_user_collectives", {}), "llama_tp": ("llama_tp", {}),
             "llama_tp_plan": ("llama_tp_plan", {}), "refusals": ("refusals", {}),
             "mlp_ddp": ("mlp_ddp", {}), "mlp_ddp_grad": ("mlp_ddp", {"TLX_GRAD": "1"})}


@pytest.fixture(scope="module")
def two_ranks(tmp_path_factory) -> dict[str, list[dict]]:
    """Every two-rank scenario's reports, from one spawn."""
    return run_batch(TWO_RANKS, tmp_path_factory.mktemp("two-ranks"))


def _ops(report: dict, **match) -> list[dict]:
    return [op for op in report["ops"] if all(op.get(k) == v for k, v in match.items())]


def _collectives(report: dict) -> list[tuple[str, str]]:
    return [(op["collective"]["name"], op["collective"]["api"]) for op in _ops(report, kind="collective")]


def _common(reports: list[dict], world: int = 2) -> None:
    assert [r["rank"] for r in reports] == list(range(world))
    for r in reports:
        assert r["output_equal"], "trace.output differs from the plain distributed forward"
        assert r["roundtrip_equal"] and r["values_plain"]
        assert r["provenance"]["rank"] == r["rank"] and r["provenance"]["world_size"] == world
        assert r["provenance"]["backend"] == "gloo"
        for op in _ops(r, kind="collective"):
            assert op["collective"]["group"] == list(range(world)) and op["collective"]["size"] == world
            assert op["collective"]["payload_bytes"] > 0 and not op["collective"]["estimated"]


def test_mlp_colwise_rowwise(two_ranks):
    reports = two_ranks["mlp_tp"]
    _common(reports)
    for r in reports:
        up, down = _ops(r, func="torch.nn.functional.linear")
        assert up["layout"]["placements"] == ["Shard(1)"] and up["layout"]["global_shape"] == [4, 32]
        assert up["shape"] == up["layout"]["local_shape"] == [4, 16]  # the op records the local shard
        assert down["layout"]["placements"] == ["Partial(sum)"] and down["shape"] == [4, 16]
        assert up["layout"]["mesh_dims"] == ["tp"] and up["layout"]["mesh_ranks"] == [0, 1]
        (ar,) = _ops(r, kind="collective")
        assert ar["collective"]["name"] == "all_reduce" and ar["collective"]["reduce_op"] == "sum"
        assert ar["parents"] == [down["label"]] and ar["collective"]["payload_bytes"] == 4 * 16 * 4
        assert r["params"]["up.weight"]["placements"] == ["Shard(0)"]
        assert r["params"]["up.weight"]["local_shape"] == [16, 16]
        assert r["params"]["down.weight"]["placements"] == ["Shard(1)"]
        assert r["params"]["down.bias"]["placements"] == ["Replicate()"] and r["params"]["norm.weight"] is None


def test_mlp_colwise_rowwise_four_ranks(tmp_path):
    reports = run_ranks("mlp_tp", tmp_path, world_size=4)
    _common(reports, world=4)
    for r in reports:
        up, down = _ops(r, func="torch.nn.functional.linear")
        assert up["shape"] == [4, 8] and up["layout"]["global_shape"] == [4, 32]
        assert up["layout"]["mesh_ranks"] == [0, 1, 2, 3]
        (ar,) = _ops(r, kind="collective")
        assert ar["collective"]["wire_bytes"] == 2 * 3 * 256 // 4  # ring all-reduce: 2 (n - 1) / n x payload


def test_mlp_sequence_parallel(two_ranks):
    reports = two_ranks["mlp_sequence_parallel"]
    _common(reports)
    for r in reports:
        (norm,) = _ops(r, func="torch.nn.functional.layer_norm")
        assert norm["layout"]["placements"] == ["Shard(1)"] and norm["shape"] == [2, 4, 16]
        assert norm["layout"]["global_shape"] == [2, 8, 16]
        assert _collectives(r) == [("all_gather", "funcol"), ("reduce_scatter", "funcol")]


def test_user_collectives_c10d_and_functional(two_ranks):
    reports = two_ranks["mlp_user_collectives"]
    _common(reports)
    for r in reports:
        assert _collectives(r) == [("all_reduce", "c10d"), ("broadcast", "c10d"), ("all_gather", "c10d"),
                                   ("reduce_scatter", "c10d"), ("all_to_all", "c10d"), ("all_reduce", "funcol"),
                                   ("all_gather", "funcol")]
        gather = _ops(r, kind="collective")[2]
        assert gather["shape"] == [8, 8] and gather["collective"]["payload_bytes"] == 4 * 8 * 4
        assert gather["collective"]["wire_bytes"] == 4 * 8 * 4  # (n - 1) x the shard on a ring of 2


def test_tiny_llama_tensor_parallel(two_ranks):
    reports = two_ranks["llama_tp"]
    _common(reports)
    for r in reports:
        assert _collectives(r) == [("all_reduce", "funcol")] * 4  # o_proj and down_proj of 2 layers
        q = _ops(r, module="model.layers.0.self_attn.q_proj")[0]
        assert q["layout"]["placements"] == ["Shard(2)"] and q["shape"] == [1, 12, 32]
        assert q["layout"]["global_shape"] == [1, 12, 64]
        assert r["params"]["model.layers.0.self_attn.o_proj.weight"]["placements"] == ["Shard(1)"]


def test_tiny_llama_transformers_tp_plan(two_ranks):
    reports = two_ranks["llama_tp_plan"]
    _common(reports)
    for r in reports:
        names = [name for name, _api in _collectives(r)]
        assert names.count("all_reduce") == 5 and names[-1] == "all_gather"  # embedding, 2x2 rowwise; lm_head
        (emb,) = _ops(r, func="torch.nn.functional.embedding")
        assert emb["layout"]["placements"][0].startswith("Partial(")  # vocab-parallel embedding
        assert r["params"]["model.embed_tokens.weight"]["placements"] == ["Shard(0)"]


def test_untested_setups_refuse_typed_and_leave_the_model_unchanged(two_ranks):
    for r in two_ranks["refusals"]:
        for name, state in (("backward", "backward"), ("structure_only", "DTensor"), ("pipeline", "pipeline_parallel")):
            assert r[name]["code"] == "distributed_capture_unsupported" and r[name]["state"] == state
            assert r[name]["site"] and r[name]["remedy"]
        assert r["forward_unchanged"] and r["hooks_unchanged"]


@pytest.mark.parametrize("grad", [False, True])
def test_ddp_forward_is_captured_and_its_unseen_broadcast_disclosed(two_ranks, grad):
    reports = two_ranks["mlp_ddp_grad" if grad else "mlp_ddp"]
    _common(reports)
    for r in reports:
        assert _collectives(r) == []
        assert [o["module"] for o in _ops(r, func="torch.nn.functional.linear")] == ["module.0"]
        assert any("DistributedDataParallel" in w and "_broadcast_coalesced" in w for w in r["warnings"])
