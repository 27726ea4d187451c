"""[issue 7] DTensor tensor parallelism on a two-process CPU gloo mesh: capture refuses, typed.

Two processes (torch.multiprocessing spawn, 127.0.0.1, a free port) form a gloo group. Part one
shards a two-linear MLP with `parallelize_module` (column-wise, then row-wise); part two loads a
tiny random Llama checkpoint saved by the test with transformers' `tp_plan="auto"`. On every
rank the sharded forward runs and matches the unsharded one, capture refuses at entry with
`DistributedCaptureUnsupportedError` naming the `dtensor` and `tensor_parallel` kinds, and the
model, hooks and torch state are as before. Every wait is bounded; results come back as JSON.
"""
from __future__ import annotations

import json
import os
import socket
import time
import traceback
from datetime import timedelta
from pathlib import Path

import pytest
import torch
from torch import nn

from tests.state import snapshot

WORLD = 2
DEADLINE_S = 240
IDS = [[5, 17, 3, 99, 42, 7, 0, 61]]


class MLP(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.up = nn.Linear(8, 16)
        self.down = nn.Linear(16, 8)

    def forward(self, x):
        return self.down(torch.relu(self.up(x)))



def _refusal(model: nn.Module, args: tuple) -> dict:
    import tracer
    from tracer.errors import DistributedCaptureUnsupportedError

    before = snapshot(model)
    out_before = _local(model(*args))
    try:
        tracer.trace(model, args)
        got = {"refused": False}
    except DistributedCaptureUnsupportedError as err:
        got = {"refused": True, "code": err.code, "site": err.site, "remedy": bool(err.remedy),
               "kinds": err.findings["kinds"], "num_dtensors": err.findings["num_dtensors"],
               "placements": err.findings["placements"], "mesh": err.findings["mesh"]}
    after = snapshot(model)
    got["state_restored"] = before == after
    got["forward_unchanged"] = torch.equal(_local(model(*args)), out_before)
    from tracer.compat.doctor import doctor

    row = doctor(model).row("distributed.tensor_parallel")
    got["doctor"] = {"status": row.status, "severity": row.severity, "evidence": " ".join(row.tests)}
    return got


def _local(t):
    t = getattr(t, "logits", t)
    return t.full_tensor() if hasattr(t, "full_tensor") else t


def _worker(rank: int, port: int, out_dir: str, ckpt: str) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank), WORLD_SIZE=str(WORLD),
                      LOCAL_RANK=str(rank), LOCAL_WORLD_SIZE=str(WORLD))
    torch.set_num_threads(1)
    import torch.distributed as dist

    result: dict = {"rank": rank}
    try:
        dist.init_process_group("gloo", rank=rank, world_size=WORLD, timeout=timedelta(seconds=60))
        result["mlp"] = _mlp_part()
        result["tp_plan"] = _tp_plan_part(ckpt)
    except Exception:
        result["error"] = traceback.format_exc()
    finally:
        Path(out_dir, f"rank{rank}.json").write_text(json.dumps(result))
        if dist.is_initialized():
            dist.destroy_process_group()


def _mlp_part() -> dict:
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import DTensor
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

    mesh = init_device_mesh("cpu", (WORLD,))
    x = torch.randn(4, 8, generator=torch.Generator().manual_seed(3))
    reference = MLP()(x)
    model = parallelize_module(MLP(), mesh, {"up": ColwiseParallel(), "down": RowwiseParallel()})
    got = _refusal(model, (x,))
    got["sharded"] = {n: [repr(p) for p in t.placements] for n, t in model.named_parameters() if isinstance(t, DTensor)}
    got["local_up_rows"] = model.up.weight.to_local().shape[0]
    got["max_diff"] = float((model(x) - reference).abs().max())
    return got


def _tp_plan_part(ckpt: str) -> dict:
    from torch.distributed.tensor import DTensor
    from transformers import LlamaForCausalLM

    try:
        from transformers.distributed import DistributedConfig

        model = LlamaForCausalLM.from_pretrained(ckpt, distributed_config=DistributedConfig(tp_plan="auto")).eval()
    except Exception:
        return {"loaded": False, "error": traceback.format_exc()[-2000:]}
    ids = torch.tensor(IDS)
    plain = LlamaForCausalLM.from_pretrained(ckpt).eval()
    with torch.no_grad():
        diff = float((_local(model(ids)) - plain(ids).logits).abs().max())
    attn = model.model.layers[0].self_attn
    got = _refusal(model, (ids,))
    got.update(loaded=True, max_diff=diff, tp_size=getattr(model, "_tp_size", None),
               projections={n: type(getattr(attn, n).weight).__name__ for n in ("q_proj", "k_proj", "v_proj", "o_proj")},
               q_placements=[repr(p) for p in attn.q_proj.weight.placements] if isinstance(attn.q_proj.weight, DTensor) else None)
    return got


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _run_ranks(tmp_path: Path, ckpt: str) -> list[dict]:
    import torch.multiprocessing as mp

    ctx = mp.start_processes(_worker, args=(_free_port(), str(tmp_path), ckpt), nprocs=WORLD, join=False,
                             start_method="spawn")
    deadline = time.monotonic() + DEADLINE_S
    try:
        while not ctx.join(timeout=max(1.0, deadline - time.monotonic())):
            if time.monotonic() > deadline:
                pytest.fail(f"the two-process gloo run did not finish in {DEADLINE_S} s")
    finally:
        for p in ctx.processes:
            if p.is_alive():
                p.kill()
    return [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(WORLD)]


@pytest.fixture(scope="module")
def ranks(tmp_path_factory) -> list[dict]:
    from transformers import LlamaConfig, LlamaForCausalLM

    root = tmp_path_factory.mktemp("dtensor")
    torch.manual_seed(0)
    cfg = LlamaConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
                      num_key_value_heads=2, vocab_size=100, max_position_embeddings=64)
    LlamaForCausalLM(cfg).save_pretrained(root / "ckpt")
    results = _run_ranks(root, str(root / "ckpt"))
    for r in results:
        assert "error" not in r, r["error"]
    return results


@pytest.mark.slow
def test_parallelize_module_mlp_refuses_on_every_rank(ranks):
    for r in ranks:
        mlp = r["mlp"]
        assert mlp["sharded"] == {"up.weight": ["Shard(dim=0)"], "up.bias": ["Shard(dim=0)"],
                                  "down.weight": ["Shard(dim=1)"], "down.bias": ["Replicate()"]}
        assert mlp["local_up_rows"] == 16 // WORLD
        assert mlp["max_diff"] < 1e-5  # the sharded forward ran and equals the unsharded MLP
        assert mlp["refused"] and mlp["code"] == "distributed_capture_unsupported" and mlp["remedy"]
        assert mlp["kinds"] == ["dtensor", "tensor_parallel"] and mlp["num_dtensors"] == 4
        assert mlp["mesh"] == "cpu:[0, 1]" and mlp["site"] == "up.weight"
        assert mlp["placements"]["up.weight"] == ["Shard(dim=0)"]
        assert mlp["state_restored"] and mlp["forward_unchanged"]
        assert mlp["doctor"]["status"] == "scope" and "test_dtensor.py" in mlp["doctor"]["evidence"]


@pytest.mark.slow
def test_tp_plan_auto_llama_is_sharded_matches_and_refuses(ranks):
    for r in ranks:
        tp = r["tp_plan"]
        assert tp["loaded"], tp.get("error")
        assert tp["tp_size"] == WORLD
        assert tp["projections"] == dict.fromkeys(("q_proj", "k_proj", "v_proj", "o_proj"), "DTensor")
        assert tp["q_placements"] == ["Shard(dim=0)"]
        assert tp["max_diff"] < 1e-5  # row-wise all-reduce reorders sums: close, not bit-equal
        assert tp["refused"] and tp["code"] == "distributed_capture_unsupported"
        assert tp["kinds"] == ["dtensor", "tensor_parallel"]
        assert tp["state_restored"] and tp["forward_unchanged"]
        assert tp["doctor"]["status"] == "scope"


def test_single_process_detection_has_no_findings_for_a_plain_model():
    from tracer.bridges.distributed import distributed_findings

    assert distributed_findings(MLP(), (torch.randn(2, 8),)) is None
    from tests.models import tiny_llama

    assert distributed_findings(tiny_llama()) is None  # a class-level _tp_plan alone is not tensor parallel
