"""One rank of a multi-process test: `python -m tests.distributed.workers SCENARIO OUT_DIR` (RANK etc. in env).

Each scenario builds a real model with the same seed on every rank, shards it, runs the plain
distributed forward, captures the same forward with `tracer.trace`, and writes what the test
asserts to OUT_DIR/rank{R}.json: ops, layouts, collectives, bitwise output equality, a save/load round trip.
"""
from __future__ import annotations

import json
import os
import sys
import tempfile
from dataclasses import asdict
from pathlib import Path

import torch
import torch.distributed as dist
from torch import nn


def _init() -> tuple[int, int]:
    """This rank's process group (made once: the scenarios of a batch share it)."""
    if not dist.is_initialized():
        dist.init_process_group("gloo", rank=int(os.environ["RANK"]), world_size=int(os.environ["WORLD_SIZE"]))
    return dist.get_rank(), dist.get_world_size()


def _mesh(world: int, name: str = "tp"):
    from torch.distributed.device_mesh import init_device_mesh

    return init_device_mesh("cpu", (world,), mesh_dim_names=(name,))


class MLP(nn.Module):
    def __init__(self, d: int = 16, hidden: int = 32) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(d)
        self.up = nn.Linear(d, hidden)
        self.down = nn.Linear(hidden, d)

    def forward(self, x):
        return self.down(torch.relu(self.up(self.norm(x))))


def _equal(a, b) -> bool:
    if isinstance(a, torch.Tensor):
        return bool(torch.equal(_plain(a), _plain(b)))
    if hasattr(a, "logits"):
        return _equal(a.logits, b.logits)
    return False


def _plain(t):
    if type(t).__name__ == "DTensor":
        t = t.to_local()
    if type(t).__name__ == "AsyncCollectiveTensor":
        t = t.wait()
    return t.detach()


def _report(trace, plain_out) -> dict:
    import tracer

    if os.environ.get("TLX_DEBUG_OPS"):
        print([(o.label, o.func, o.out, o.module, [e.source for e in o.parents], dict(o.attrs)) for o in trace.ops if "empty" in o.label], flush=True)
    with tempfile.TemporaryDirectory() as d:
        trace.save(Path(d) / "t")
        loaded = tracer.load(Path(d) / "t")
    ops = [{"label": op.label, "kind": op.kind, "func": op.func, "shape": list(op.out.shape) if op.out else None,
            "module": op.module, "parents": [e.source for e in op.parents], "params": list(op.params),
            "layout": asdict(op.layout) if op.layout else None,
            "collective": {**asdict(op.collective), "size": op.collective.size} if op.collective else None}
           for op in trace.ops]
    return {
        "rank": dist.get_rank(),
        "output_equal": _equal(trace.output, plain_out),
        "ops": ops,
        "params": {a: asdict(p.layout) if p.layout else None for a, p in trace.params.items()},
        "provenance": dict(trace.provenance.distributed or {}),
        "roundtrip_equal": [(o.layout, o.collective, o.out, o.kind, o.label) for o in loaded.ops]
                           == [(o.layout, o.collective, o.out, o.kind, o.label) for o in trace.ops]
                           and {a: p.layout for a, p in loaded.params.items()}
                           == {a: p.layout for a, p in trace.params.items()},
        "values_plain": all(type(v) is torch.Tensor for v in trace.values.values()),
        "warnings": list(trace.warnings),
    }


def _capture(model, args) -> dict:
    import tracer

    with torch.no_grad():
        plain = model(*args)
        traced = tracer.trace(model, args)
    return _report(traced, plain)


def mlp_tp() -> dict:
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

    _rank, world = _init()
    torch.manual_seed(0)
    model = MLP()
    parallelize_module(model, _mesh(world), {"up": ColwiseParallel(), "down": RowwiseParallel()})
    return _capture(model, (torch.randn(4, 16),))


def mlp_sequence_parallel() -> dict:
    from torch.distributed.tensor import Shard
    from torch.distributed.tensor.parallel import (ColwiseParallel, RowwiseParallel, SequenceParallel,
                                                   parallelize_module)

    _rank, world = _init()
    torch.manual_seed(0)
    model = MLP()
    parallelize_module(model, _mesh(world), {
        "norm": SequenceParallel(),
        "up": ColwiseParallel(input_layouts=Shard(1)),
        "down": RowwiseParallel(output_layouts=Shard(1)),
    })
    x = torch.randn(2, 8, 16)  # (batch, sequence, hidden): each rank holds its half of the sequence
    return _capture(model, (x.chunk(world, dim=1)[dist.get_rank()].contiguous(),))


def _talker(world: int) -> nn.Module:
    """A forward issuing c10d all_reduce, broadcast, all_gather, reduce_scatter, all_to_all and two funcol calls."""
    import torch.distributed._functional_collectives as funcol

    class Talker(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.lin = nn.Linear(8, 8)

        def forward(self, x):
            y = self.lin(x)
            dist.all_reduce(y)
            dist.broadcast(y, src=0)
            gathered = torch.empty(world * 4, 8)
            dist.all_gather_into_tensor(gathered, y)
            scattered = torch.empty(4, 8)
            dist.reduce_scatter_tensor(scattered, gathered)
            swapped = torch.empty_like(scattered)
            dist.all_to_all_single(swapped, scattered)
            z = funcol.all_reduce(swapped, "sum", dist.group.WORLD)
            return funcol.all_gather_tensor(z, 0, dist.group.WORLD) * 1.0

    return Talker()


def mlp_user_collectives() -> dict:
    """Collectives the user's own forward issues: c10d and functional, with a subgroup."""
    rank, world = _init()
    torch.manual_seed(rank)  # different on each rank: the collectives must really combine them
    model = _talker(world)
    return _capture(model, (torch.randn(4, 8),))


def _tiny_llama():
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                         num_key_value_heads=2, head_dim=16, vocab_size=128, max_position_embeddings=64)
    torch.manual_seed(0)
    return LlamaForCausalLM(config).eval()


LLAMA_TP_PLAN = {
    "model.layers.*.self_attn.q_proj": "colwise", "model.layers.*.self_attn.k_proj": "colwise",
    "model.layers.*.self_attn.v_proj": "colwise", "model.layers.*.self_attn.o_proj": "rowwise",
    "model.layers.*.mlp.gate_proj": "colwise", "model.layers.*.mlp.up_proj": "colwise",
    "model.layers.*.mlp.down_proj": "rowwise",
}


def llama_tp() -> dict:
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

    _rank, world = _init()
    model = _tiny_llama()
    styles = {"colwise": ColwiseParallel, "rowwise": RowwiseParallel}
    parallelize_module(model, _mesh(world), {k: styles[v]() for k, v in LLAMA_TP_PLAN.items()})
    ids = torch.arange(12).reshape(1, 12) % 128
    return _capture(model, (ids,))


def llama_tp_plan() -> dict:
    """A tiny Llama loaded by transformers with tp_plan="auto" (its own sharding plan, DTensor weights)."""
    from transformers import LlamaForCausalLM
    from transformers.distributed import DistributedConfig

    rank, _world = _init()
    ckpt = Path(sys.argv[2]) / "ckpt"
    if rank == 0:
        _tiny_llama().save_pretrained(ckpt)
    dist.barrier()
    model = LlamaForCausalLM.from_pretrained(ckpt, distributed_config=DistributedConfig(tp_plan="auto")).eval()
    ids = torch.arange(12).reshape(1, 12) % 128
    return _capture(model, (ids,))



def refusals() -> dict:
    """What stays refused inside a process group: typed, with site and remedy, the model unchanged."""
    import tracer
    from tracer.errors import DistributedCaptureUnsupportedError
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

    _rank, world = _init()
    torch.manual_seed(0)
    model = MLP()
    parallelize_module(model, _mesh(world), {"up": ColwiseParallel(), "down": RowwiseParallel()})
    x = torch.randn(4, 16)
    with torch.no_grad():
        before = _plain(model(x))
    hooks = sum(len(m._forward_hooks) + len(m._forward_pre_hooks) for m in model.modules())
    out: dict = {}
    for name, options in {"backward": tracer.CaptureOptions(backward=True),
                          "structure_only": tracer.CaptureOptions(structure_only=True)}.items():
        try:
            tracer.trace(model, (x,), capture=options)
            out[name] = None
        except DistributedCaptureUnsupportedError as err:
            out[name] = {"code": err.code, "site": err.site, "remedy": err.remedy, "state": err.findings["state"]}
    from torch.distributed.pipelining import SplitPoint, pipeline

    pipe = pipeline(MLP(), mb_args=(x,), split_spec={"down": SplitPoint.BEGINNING})  # two stages
    try:
        tracer.trace(pipe, (x,))
        out["pipeline"] = None
    except DistributedCaptureUnsupportedError as err:
        out["pipeline"] = {"code": err.code, "site": err.site, "remedy": err.remedy, "state": err.findings["state"]}
    with torch.no_grad():
        out["forward_unchanged"] = bool(torch.equal(_plain(model(x)), before))
    out["hooks_unchanged"] = hooks == sum(len(m._forward_hooks) + len(m._forward_pre_hooks) for m in model.modules())
    return out


def _fully_shard(model: nn.Module, blocks: list, world: int) -> nn.Module:
    from torch.distributed.fsdp import fully_shard

    mesh = _mesh(world, "dp")
    for block in blocks:
        fully_shard(block, mesh=mesh)
    fully_shard(model, mesh=mesh)
    return model


def mlp_fsdp() -> dict:
    """FSDP2 on the MLP: each Linear its own unit, the root holding the LayerNorm."""
    rank, world = _init()
    torch.manual_seed(0)
    model = MLP()
    _fully_shard(model, [model.up, model.down], world)
    torch.manual_seed(1 + rank)  # data parallel: each rank its own batch
    return _capture(model, (torch.randn(4, 16),))


def llama_fsdp() -> dict:
    """FSDP2 on the tiny Llama: each decoder layer a unit, the root the rest."""
    rank, world = _init()
    model = _tiny_llama()
    _fully_shard(model, list(model.model.layers), world)
    ids = (torch.arange(12).reshape(1, 12) * (rank + 1)) % 128
    return _capture(model, (ids,))


def gathered_tp() -> dict:
    """The tensor-parallel MLP captured on each rank, then gathered onto rank 0, saved and loaded there."""
    import tracer
    import tracer.distributed as td
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

    rank, world = _init()
    torch.manual_seed(0)
    model = MLP()
    parallelize_module(model, _mesh(world), {"up": ColwiseParallel(), "down": RowwiseParallel()})
    with torch.no_grad():
        local = tracer.trace(model, (torch.randn(4, 16),))
    gathered = td.gather(local)
    if rank != 0:
        return {"rank": rank, "gathered": gathered is None}
    loaded = tracer.load(gathered.save(Path(sys.argv[2]) / "gathered"))  # kept: the explorer's browser test opens it
    folded = td.fold(gathered)
    return {
        "rank": rank, "local_ops": len(local.ops),
        "ops": [{"label": o.label, "rank": o.rank, "kind": o.kind, "parents": [[e.source, e.position] for e in o.parents]}
                for o in gathered.ops],
        "groups": gathered.provenance.distributed["rank_groups"],
        "matched": gathered.provenance.distributed["matched_collectives"],
        "roundtrip_equal": [(o.label, o.rank, o.parents, o.collective) for o in loaded.ops]
                           == [(o.label, o.rank, o.parents, o.collective) for o in gathered.ops],
        "folded_ops": len(folded.ops), "folded_ranks": sorted({o.rank for o in folded.ops}),
    }


def validation() -> dict:
    """validate_rank on the user-collectives capture, on a copy with a gathered slice zeroed, and the refusal of
    tracer.validate (which would replay collectives on one rank alone)."""
    import dataclasses

    import tracer
    import tracer.distributed as td
    from tracer.errors import DistributedReplayUnsupportedError

    rank, world = _init()

    class Gatherer(nn.Module):
        def forward(self, x):
            y = x * 2.0
            out = torch.empty(world * 4, 8)
            dist.all_gather_into_tensor(out, y)
            dist.all_reduce(y)
            return out + 1.0, y

    torch.manual_seed(rank)
    t = tracer.trace(Gatherer(), (torch.randn(4, 8),))
    good = td.validate_rank(t)
    gathered = next(op.label for op in t.ops if op.kind == "collective" and op.collective.name == "all_gather")
    bad_values = dict(t.values)
    bad_values[gathered] = torch.zeros_like(bad_values[gathered])
    bad = td.validate_rank(dataclasses.replace(t, values=bad_values))
    shapes = [dataclasses.replace(op, out=dataclasses.replace(op.out, shape=(3, 8))) if op.label == gathered else op
              for op in t.ops]
    bad_shape = td.validate_rank(dataclasses.replace(t, ops=tuple(shapes)))
    try:
        tracer.validate(t)
        refused = None
    except DistributedReplayUnsupportedError as err:
        refused = {"code": err.code, "site": err.site, "remedy": err.remedy}
    as_dict = lambda r: {"passed": r.passed, "collectives": r.collectives, "shape_checked": r.shape_checked,
                         "value_checked": r.value_checked, "not_checked": r.not_checked,
                         "findings": [[f.label, f.check] for f in r.findings]}
    return {"rank": rank, "good": as_dict(good), "bad": as_dict(bad), "bad_shape": as_dict(bad_shape),
            "refused": refused, "gathered": gathered, "gathered_readers": t.children_of(gathered),
            "replayed": [good.ops_replayed, good.ops_exact, good.ops_nondeterministic]}


def _rank_report(r) -> dict:
    return {"passed": r.passed, "collectives": r.collectives, "shape_checked": r.shape_checked,
            "value_checked": r.value_checked, "not_checked": r.not_checked, "ops_replayed": r.ops_replayed,
            "ops_exact": r.ops_exact, "ops_nondeterministic": r.ops_nondeterministic, "replay_not_checked": [list(x) for x in r.replay_not_checked],
            "findings": [[f.label, f.check] for f in r.findings], "text": r.to_text()}


def validation_replay() -> dict:
    """validate_rank replaying the local ops of the tensor-parallel MLP and tiny Llama; then with one saved
    activation tampered (its op and its reader must fail replay)."""
    import dataclasses

    import tracer
    import tracer.distributed as td
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

    rank, world = _init()
    torch.manual_seed(0)
    mlp = MLP()
    parallelize_module(mlp, _mesh(world), {"up": ColwiseParallel(), "down": RowwiseParallel()})
    llama = _tiny_llama()
    styles = {"colwise": ColwiseParallel, "rowwise": RowwiseParallel}
    parallelize_module(llama, _mesh(world), {k: styles[v]() for k, v in LLAMA_TP_PLAN.items()})
    out: dict = {"rank": rank}
    for name, model, args, tamper in (("mlp", mlp, (torch.randn(4, 16),), "relu_1"),
                                      ("llama", llama, (torch.arange(12).reshape(1, 12) % 128,), None)):
        with torch.no_grad():
            t = tracer.trace(model, args)
        local = [op for op in t.ops if op.collective is None and op.kind not in ("input", "output", "constant")]
        tamper = tamper or next(op.label for op in local if op.kind == "silu")
        values = dict(t.values)
        values[tamper] = values[tamper] + 1.0
        readers = t.children_of(tamper)
        dtensor_ops = [op.label for op in local if op.layout is not None]
        out[name] = {"good": _rank_report(td.validate_rank(t)),
                     "bad": _rank_report(td.validate_rank(dataclasses.replace(t, values=values))),
                     "tampered": tamper, "readers": readers, "local_ops": len(local), "dtensor_ops": dtensor_ops,
                     "unsaved": sorted(op.label for op in local if op.label not in t.values)}
    return out


_PROFILER_KINDS = {  # c10d dispatcher ops the profiler records -> the collective they are
    "allreduce_": "all_reduce", "allreduce_coalesced_": "all_reduce", "broadcast_": "broadcast", "reduce_": "reduce",
    "_allgather_base_": "all_gather", "allgather_": "all_gather", "allgather_into_tensor_coalesced_": "all_gather",
    "allgather_coalesced_": "all_gather", "_reduce_scatter_base_": "reduce_scatter", "reduce_scatter_": "reduce_scatter",
    "reduce_scatter_tensor_coalesced_": "reduce_scatter", "alltoall_base_": "all_to_all", "alltoall_": "all_to_all",
}


def profiled() -> dict:
    """User c10d + functional collectives, then an FSDP2 MLP, each captured under torch.profiler and gathered:
    per rank, the c10d ops the profiler saw (by kind) and the collectives the gathered trace holds."""
    from collections import Counter

    import tracer.distributed as td

    rank, world = _init()
    import tracer

    talker_args = None
    out: dict = {"rank": rank}
    for name in ("user", "fsdp"):
        if name == "user":
            model = _talker(world)
            torch.manual_seed(rank)
            talker_args = (torch.randn(4, 8),)
            args = talker_args
        else:
            torch.manual_seed(0)
            model = MLP()
            _fully_shard(model, [model.up, model.down], world)
            torch.manual_seed(1 + rank)
            args = (torch.randn(4, 16),)
        with torch.no_grad():
            model(*args)  # warm: FSDP's lazy init runs outside the profiled capture
            with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
                t = tracer.trace(model, args)
        seen = Counter(_PROFILER_KINDS[e.name.split("::", 1)[1]] for e in prof.events()
                       if e.name.startswith("c10d::") and e.name.split("::", 1)[1] in _PROFILER_KINDS)
        unknown = sorted({e.name for e in prof.events() if e.name.startswith("c10d::")
                          and e.name.split("::", 1)[1] not in _PROFILER_KINDS})
        gathered = td.gather(t)
        out[name] = {"profiler": dict(seen), "unknown_c10d": unknown}
        if gathered is not None:
            out[name]["gathered"] = {str(r): dict(Counter(op.collective.name for op in gathered.ops
                                                          if op.rank == r and op.collective is not None))
                                     for r in range(world)}
    return out


def refused_collectives() -> dict:
    """Async and list-form c10d calls inside a captured forward: refused typed before they run, on every rank;
    afterwards the process group still works and no function mode is left installed."""
    import tracer
    from tracer.errors import DistributedCaptureUnsupportedError

    rank, world = _init()

    def forward(kind):
        def run(x):
            y = x * 2.0
            if kind == "async":
                dist.all_reduce(y, async_op=True).wait()
                return y
            if kind == "all_gather":
                outs = [torch.empty_like(y) for _ in range(world)]
                dist.all_gather(outs, y)
                return torch.cat(outs)
            if kind == "all_to_all":
                outs = [torch.empty_like(y) for _ in range(world)]
                dist.all_to_all(outs, [y.clone() for _ in range(world)])
                return torch.cat(outs)
            if kind == "send":
                if dist.get_rank() == 0:
                    dist.send(y, dst=1)
                else:
                    dist.recv(y, src=0)
                return y
            return y
        return run

    class Wrap(nn.Module):
        def __init__(self, kind):
            super().__init__()
            self.kind = kind

        def forward(self, x):
            return forward(self.kind)(x)

    out: dict = {"rank": rank}
    x = torch.ones(2, 3) * (rank + 1)
    for kind in ("async", "all_gather", "all_to_all", "send"):
        try:
            tracer.trace(Wrap(kind), (x,))
            out[kind] = None
        except DistributedCaptureUnsupportedError as err:
            out[kind] = {"code": err.code, "site": err.site, "state": err.findings.get("state"), "remedy": err.remedy}
    out["modes_left"] = torch._C._len_torch_function_stack()
    with torch.no_grad():
        plain = Wrap("async")(x)  # the group still works: both ranks' all_reduce meets
    out["group_works"] = bool(torch.equal(plain, torch.full((2, 3), 2.0 * sum(range(1, world + 1)))))
    return out


def bench_tp() -> dict:
    """Timing for tests/bench/bench_distributed.py: bare tensor-parallel forward vs its capture, interleaved."""
    import time

    import tracer
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module
    from transformers import LlamaConfig, LlamaForCausalLM

    rank, world = _init()
    repeats = int(os.environ.get("TLX_BENCH_REPEATS", "5"))
    # GPT-2 small's sizes on the Llama architecture: GPT-2's Conv1D layers have no tensor-parallel style in torch
    config = LlamaConfig(hidden_size=768, intermediate_size=3072, num_hidden_layers=12, num_attention_heads=12,
                         num_key_value_heads=12, vocab_size=50257, max_position_embeddings=1024)
    torch.manual_seed(0)
    model = LlamaForCausalLM(config).eval()
    styles = {"colwise": ColwiseParallel, "rowwise": RowwiseParallel}
    parallelize_module(model, _mesh(world), {k: styles[v]() for k, v in LLAMA_TP_PLAN.items()})
    ids = torch.arange(128).reshape(1, 128) % 50257
    runs = {"bare": lambda: model(ids), "capture": lambda: tracer.trace(model, (ids,)),
            "capture_save_none": lambda: tracer.trace(model, (ids,), capture=tracer.CaptureOptions(save="none"))}
    times: dict[str, list[float]] = {k: [] for k in runs}
    with torch.no_grad():
        for fn in runs.values():
            fn()
        for _ in range(repeats):
            for name, fn in runs.items():
                dist.barrier()
                start = time.perf_counter()
                fn()
                times[name].append(time.perf_counter() - start)
    return {"rank": rank, "times": times, "threads": torch.get_num_threads()}


def real_tp_for_discharge() -> dict:
    """A real 2-rank tensor-parallel capture of the config in TLX_CONFIG (input 1x8), saved by rank 0."""
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module
    from transformers import LlamaForCausalLM

    import tracer
    from tracer.bridges.transformers import load_config

    rank, world = _init()
    torch.manual_seed(0)
    model = LlamaForCausalLM(load_config(os.environ["TLX_CONFIG"])).eval()
    plan = os.environ.get("TLX_PLAN", "tp")
    styles = {"colwise": ColwiseParallel, "rowwise": RowwiseParallel}
    if plan == "tp":
        parallelize_module(model, _mesh(world), {k: styles[v]() for k, v in LLAMA_TP_PLAN.items()})
    else:  # a different plan: only the MLPs sharded
        parallelize_module(model, _mesh(world), {k: styles[v]() for k, v in LLAMA_TP_PLAN.items() if ".mlp." in k})
    t = tracer.trace(model, (torch.zeros(1, 8, dtype=torch.long),))
    if rank == 0:
        t.save(Path(sys.argv[2]) / "real")
    return {"rank": rank, "ops": len(t.ops)}


def mlp_ddp() -> dict:
    """A plain MLP wrapped in DistributedDataParallel (with a BatchNorm buffer DDP broadcasts), train mode."""
    from torch.nn.parallel import DistributedDataParallel

    rank, _world = _init()
    torch.manual_seed(0)
    inner = nn.Sequential(nn.Linear(16, 16), nn.BatchNorm1d(16), nn.ReLU())
    model = DistributedDataParallel(inner)
    torch.manual_seed(1 + rank)
    x = torch.randn(4, 16)
    if os.environ.get("TLX_GRAD"):  # grad mode: DDP prepares its reducer and broadcasts buffers
        import tracer

        plain = model(x)
        return _report(tracer.trace(model, (x,)), plain)
    return _capture(model, (x,))

def main() -> None:
    """`workers SCENARIO OUT_DIR`, or `workers --batch BATCH_JSON OUT_DIR`: each named scenario in turn, with
    its environment variables set while it runs, in one process group; a report per scenario and rank."""
    if sys.argv[1] == "--batch":
        batch = json.loads(Path(sys.argv[2]).read_text())
        sys.argv = [sys.argv[0], "--batch", sys.argv[3]]  # a scenario reads its folder as sys.argv[2]
    else:
        batch = [{"key": ".", "scenario": sys.argv[1], "env": {}}]
    out_dir = Path(sys.argv[2])
    try:
        for item in batch:
            folder = out_dir / item["key"]
            folder.mkdir(exist_ok=True)
            sys.argv[2] = str(folder)
            saved = {k: os.environ.get(k) for k in item["env"]}
            os.environ.update(item["env"])
            try:
                report = globals()[item["scenario"]]()
            finally:
                for k, v in saved.items():
                    if v is None:
                        os.environ.pop(k, None)
                    else:
                        os.environ[k] = v
            (folder / f"rank{os.environ['RANK']}.json").write_text(json.dumps(report, default=str))
            if dist.is_initialized():  # no rank goes on (or tears the group down) while another still works in it
                dist.barrier()
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()


if __name__ == "__main__":
    main()
    # Every report is written and the group destroyed: leave without the interpreter's finalization, where
    # torch's gloo threads were once torn down into std::terminate ("terminate called without an active
    # exception", SIGABRT, no Python frame) after rank 0 had written its report (a fresh clone's run, stop 45).
    # A scenario that fails still raises above and exits non-zero. Python's own exit functions still run.
    import atexit

    atexit._run_exitfuncs()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)
