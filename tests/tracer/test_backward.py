"""[issue 14] The backward pass in a trace: nodes linked to forward ops, gradients, saved-for-backward bytes.

Real models from small configs: gradients equal the plain backward's bit for bit; the bytes saved
for the backward equal what a hand-written `saved_tensors_hooks` counts; activation checkpointing
shows recomputation and lowers the bytes; a weights-free (meta) step of a small Llama saves exactly
the bytes a real step of the same config saves; failures are typed and leave no hook behind.
"""
from __future__ import annotations

import copy

import pytest
import torch
from torch import nn

import tracer
from tracer.backward.memory import training_memory
from tracer.errors import BackwardFailedError, InvalidInputError
from tracer.options import CaptureOptions

BACKWARD = CaptureOptions(backward=True)


def _plain_grads(model: nn.Module, args: tuple, loss, kwargs: dict | None = None) -> dict[str, torch.Tensor]:
    twin = copy.deepcopy(model)
    loss(twin(*args, **(kwargs or {}))).backward()
    return {n: p.grad for n, p in twin.named_parameters() if p.grad is not None}


def _hooks(model: nn.Module) -> int:
    return sum(len(m._forward_hooks) + len(m._forward_pre_hooks) for m in model.modules())


def _hand_counted_bytes(model: nn.Module, args: tuple, kwargs: dict | None = None) -> int:
    """Bytes of every tensor the forward saves for backward, counted by a plain `saved_tensors_hooks`."""
    total = 0

    def pack(t):
        nonlocal total
        total += t.numel() * t.element_size()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        model(*args, **(kwargs or {}))
    return total


def test_mlp_gradients_nodes_and_saved_tensors():
    torch.manual_seed(0)
    mlp = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))
    x = torch.randn(3, 4)
    plain = _plain_grads(mlp, (x,), lambda o: o.sum())
    t = tracer.trace(mlp, (x,), capture=BACKWARD)
    bw = t.backward
    assert bw.loss == "output.sum()" and not bw.estimate
    assert {n: p.grad for n, p in mlp.named_parameters()}.keys() == plain.keys()
    assert all(torch.equal(p.grad, plain[n]) for n, p in mlp.named_parameters())  # the plain backward's, bit for bit
    assert all(torch.equal(bw.param_grads[n], plain[n]) for n in plain)
    # Every forward op with an autograd node is linked to it; AccumulateGrad nodes name their parameter.
    assert bw.node_of("linear_2").name == "AddmmBackward0" and bw.node_of("relu_1").name == "ReluBackward0"
    assert {n.param for n in bw.nodes if n.param} == set(plain)
    assert all(n.order is not None for n in bw.nodes)  # every node ran
    assert bw.grads["relu_1"].shape == (3, 8)
    # What each op saves, and what it aliases: the input, its own output, a parameter's transpose.
    assert [s.alias for s in bw.saved["linear_1"]] == ["input:input_1"]
    assert [s.alias for s in bw.saved["relu_1"]] == ["output:relu_1"]
    assert [s.alias for s in bw.saved["linear_2"]] == ["output:relu_1", "param:2.weight"]
    assert _hooks(mlp) == 0


def test_batchnorm_cnn_in_train_mode_gradients_equal_the_plain_backward():
    torch.manual_seed(0)
    cnn = nn.Sequential(nn.Conv2d(3, 8, 3), nn.BatchNorm2d(8), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(),
                        nn.Linear(8, 4)).train()
    x = torch.randn(2, 3, 8, 8)
    plain = _plain_grads(cnn, (x,), lambda o: o.square().mean())
    t = tracer.trace(cnn, (x,), capture=BACKWARD, loss=lambda o: o.square().mean())
    assert all(torch.equal(p.grad, plain[n]) for n, p in cnn.named_parameters())
    assert t.backward.node_of(next(op.label for op in t.ops if op.func.endswith("batch_norm"))) is not None


def _gpt2(layers: int = 2):
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    cfg = GPT2Config(n_layer=layers, n_embd=64, n_head=4, vocab_size=128, n_positions=64, attn_pdrop=0.0,
                     resid_pdrop=0.0, embd_pdrop=0.0)
    return GPT2LMHeadModel(cfg).eval()


def test_gpt2_gradients_and_saved_bytes_equal_a_hand_count():
    model, ids = _gpt2(), torch.randint(0, 128, (1, 16))
    loss = lambda o: o.logits.sum()  # noqa: E731
    plain = _plain_grads(model, (ids,), loss)
    expected = _hand_counted_bytes(copy.deepcopy(model), (ids,))
    t = tracer.trace(model, (ids,), capture=BACKWARD, loss=loss)
    assert all(torch.equal(p.grad, plain[n]) for n, p in model.named_parameters() if n in plain)
    counted = sum(s.bytes for rows in t.backward.saved.values() for s in rows)
    assert counted == expected
    mem = training_memory(t)
    assert mem.total_saved_bytes < counted  # aliases and parameters counted once, not per saving op
    assert mem.rows[0].param_bytes == sum(p.numel() * 4 for p in model.parameters())


def _llama(meta: bool, checkpointing: bool):
    from transformers import LlamaConfig, LlamaForCausalLM

    cfg = LlamaConfig(num_hidden_layers=2, hidden_size=64, intermediate_size=128, num_attention_heads=4,
                      num_key_value_heads=2, vocab_size=128, attn_implementation="eager")
    torch.manual_seed(0)
    with torch.device("meta" if meta else "cpu"):
        model = LlamaForCausalLM(cfg)
    model.train()
    if checkpointing:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    device = "meta" if meta else "cpu"
    ids = torch.zeros(1, 16, dtype=torch.long, device=device)
    return model, (ids,), {"attention_mask": torch.ones(1, 16, dtype=torch.long, device=device)}


@pytest.mark.parametrize("checkpointing", [False, True])
def test_weights_free_training_memory_equals_a_real_step_of_the_same_config(checkpointing):
    loss = lambda o: o.logits.sum()  # noqa: E731
    real = tracer.trace(*_llama(False, checkpointing), capture=BACKWARD, loss=loss)
    meta = tracer.trace(*_llama(True, checkpointing), capture=CaptureOptions(structure_only=True, backward=True),
                        loss=loss)
    assert meta.backward.estimate and not real.backward.estimate
    a, b = training_memory(real), training_memory(meta)
    assert [(r.module, r.saved_bytes, r.param_bytes) for r in a.rows] == \
        [(r.module, r.saved_bytes, r.param_bytes) for r in b.rows]
    # The same graph: as many nodes, linked to the same forward ops (a reshape may be named
    # ReshapeAliasBackward0 on one device and ViewBackward0 on another).
    assert len(real.backward.nodes) == len(meta.backward.nodes)
    assert [n.op for n in real.backward.nodes] == [n.op for n in meta.backward.nodes]


def test_checkpointing_shows_recomputation_and_lowers_saved_bytes():
    loss = lambda o: o.logits.sum()  # noqa: E731
    plain = tracer.trace(*_llama(False, False), capture=BACKWARD, loss=loss)
    ckpt = tracer.trace(*_llama(False, True), capture=BACKWARD, loss=loss)
    assert not plain.backward.recomputed
    assert ckpt.backward.recomputed.get("model.layers.0.self_attn") == 1
    assert training_memory(ckpt).total_saved_bytes < training_memory(plain).total_saved_bytes / 4


def test_ops_without_an_autograd_node_are_listed():
    class Argmaxed(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(4, 4)

        def forward(self, x):
            y = self.lin(x)
            return y * y.argmax(-1, keepdim=True).float()

    t = tracer.trace(Argmaxed(), (torch.randn(2, 4),), capture=BACKWARD)
    assert any(label.startswith("argmax") for label in t.backward.no_node)


def test_refusals_are_typed_and_leave_nothing_installed():
    mlp = nn.Sequential(nn.Linear(4, 2))
    x = torch.randn(3, 4)
    with pytest.raises(InvalidInputError, match="scalar"):
        tracer.trace(mlp, (x,), capture=BACKWARD, loss=lambda o: o)
    with pytest.raises(InvalidInputError, match="inference-only"):
        tracer.trace(mlp, (x,), capture=CaptureOptions(backward=True, inference_only=True))
    with pytest.raises(InvalidInputError, match="requires grad"):
        with torch.no_grad():
            tracer.trace(mlp, (x,), capture=BACKWARD)

    class Boom(torch.autograd.Function):
        @staticmethod
        def forward(ctx, a):
            return a * 2

        @staticmethod
        def backward(ctx, g):
            raise RuntimeError("no gradient here")

    class UsesBoom(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(4, 2)

        def forward(self, a):
            return Boom.apply(self.lin(a))

    model = UsesBoom()
    with pytest.raises(BackwardFailedError) as err:
        tracer.trace(model, (x,), capture=BACKWARD)
    assert err.value.code == "backward_failed" and "no gradient here" in str(err.value)
    assert _hooks(model) == 0 and _hooks(mlp) == 0
    assert torch._C._len_torch_function_stack() == 0


def test_backward_validation_replays_every_node_and_catches_a_planted_wrong_gradient():
    from tracer.backward.replay import validate_backward
    from tracer.errors import ReplayUnavailableError

    model, ids = _gpt2(), torch.randint(0, 128, (1, 16))
    t = tracer.trace(model, (ids,), capture=CaptureOptions(backward=True, backward_replay=True),
                     loss=lambda o: o.logits.sum())
    report = validate_backward(t)
    assert report, report.findings
    assert report.nodes_replayed > 50 and report.nodes_exact + report.nodes_within_spread == report.nodes_replayed
    # Plant a wrong gradient: the one the first linear layer's node passed on.
    node = t.backward.node_of(next(op.label for op in t.ops if op.func.endswith("linear")))
    incoming, outgoing = t.backward.node_grads[node.index]
    planted = tuple(None if g is None else g * 1.001 + 1e-3 for g in outgoing)
    t.backward.node_grads[node.index] = (incoming, planted)
    bad = validate_backward(t)
    assert not bad and [f.index for f in bad.findings] == [node.index]
    with pytest.raises(ReplayUnavailableError):
        validate_backward(tracer.trace(model, (ids,), capture=BACKWARD, loss=lambda o: o.logits.sum()))


def test_the_backward_is_saved_and_loaded_with_its_structure_bytes_and_gradients(tmp_path):
    import json

    from tracer.errors import TraceFileTamperedError, TraceStructureInvalidError

    t = tracer.trace(*_llama(False, True), capture=BACKWARD, loss=lambda o: o.logits.sum())
    back = tracer.load(t.save(str(tmp_path / "step")))
    a, b = t.backward, back.backward
    assert (a.nodes, a.saved, a.loss, a.no_node, a.recomputed, a.notes) == \
        (b.nodes, b.saved, b.loss, b.no_node, b.recomputed, b.notes)
    assert training_memory(back) == training_memory(t)
    # The gradients come back bit for bit, op outputs and parameters, from grads.safetensors.
    assert a.grads and a.param_grads
    assert b.grads.keys() == a.grads.keys() and b.param_grads.keys() == a.param_grads.keys()
    assert all(torch.equal(b.grads[k], a.grads[k]) and b.grads[k].dtype == a.grads[k].dtype for k in a.grads)
    assert all(torch.equal(b.param_grads[k], a.param_grads[k]) for k in a.param_grads)
    from tracer.backward.replay import validate_backward
    from tracer.errors import ReplayUnavailableError

    with pytest.raises(ReplayUnavailableError, match="validate_backward_offline"):
        validate_backward(back)  # the gradients reload; the autograd nodes a replay calls do not
    # A reference to a node that does not exist is refused (after the digest is made to match).
    from tracer.digest import canonical_digest

    path = tmp_path / "step" / "trace.json"
    doc = json.loads(path.read_text())
    doc["trace"]["backward"]["nodes"][0]["next"] = [10_000]
    doc["digest"]["structure"] = canonical_digest(doc["trace"])
    path.write_text(json.dumps(doc))
    with pytest.raises((TraceStructureInvalidError, TraceFileTamperedError)) as err:
        tracer.load(str(tmp_path / "step"))
    assert "backward" in str(err.value)


def _saved_mlp(tmp_path, save_grads="all"):
    torch.manual_seed(0)
    mlp = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))
    t = tracer.trace(mlp, (torch.randn(3, 4),), capture=CaptureOptions(backward=True, save_grads=save_grads))
    return t, t.save(str(tmp_path / "mlp"))


def test_saved_gradients_follow_the_policy_and_a_bad_grads_file_is_refused_typed(tmp_path):
    import json
    import shutil

    from tracer.digest import canonical_digest
    from tracer.errors import TraceFileCorruptError, TraceFileTamperedError, TraceSchemaError, TraceStructureInvalidError

    t, folder = _saved_mlp(tmp_path, save_grads=lambda op: op.label == "relu_1")
    back = tracer.load(folder).backward
    assert set(back.grads) == {"relu_1"} and torch.equal(back.grads["relu_1"], t.backward.grads["relu_1"])
    assert set(back.param_grads) == set(t.backward.param_grads) == {"0.weight", "0.bias", "2.weight", "2.bias"}
    grads = folder / "grads.safetensors"
    raw = grads.read_bytes()
    for broken in (raw[:-4], raw[:-8] + bytes(8)):  # truncated; the last parameter gradient's bytes changed
        grads.write_bytes(broken)
        with pytest.raises(TraceFileTamperedError) as err:
            tracer.load(folder)
        assert err.value.code and "grads.safetensors" in err.value.site
    grads.unlink()  # missing
    with pytest.raises(TraceFileCorruptError):
        tracer.load(folder)
    # A grads file that is not the one the trace records.
    _, plain = _saved_mlp(tmp_path / "none", save_grads="none")
    shutil.copy(plain / "grads.safetensors", folder / "grads.safetensors")  # a grads file of another trace
    with pytest.raises(TraceFileTamperedError):
        tracer.load(folder)
    # The record in trace.json is checked too (its digest made to match): a version this build cannot
    # read, and a gradient of an op the trace lacks.
    _, folder = _saved_mlp(tmp_path / "rec")
    path = folder / "trace.json"
    pristine = path.read_text()
    for key, value, error in (("version", 99, TraceSchemaError), ("tensors", {"op:nope": [[1], "float32"]},
                                                                    TraceStructureInvalidError)):
        doc = json.loads(pristine)
        doc["trace"]["backward"]["gradients"][key] = value
        doc["digest"]["structure"] = canonical_digest(doc["trace"])
        path.write_text(json.dumps(doc))
        with pytest.raises(error) as err:
            tracer.load(folder)
        assert "gradient" in str(err.value)
    # A trace saved before gradients were kept (no `gradients` record, no grads file) still loads, without them.
    _, folder = _saved_mlp(tmp_path / "old")
    doc = json.loads((folder / "trace.json").read_text())
    del doc["trace"]["backward"]["gradients"]
    doc["digest"]["structure"] = canonical_digest(doc["trace"])
    (folder / "trace.json").write_text(json.dumps(doc))
    (folder / "grads.safetensors").unlink()
    old = tracer.load(folder)
    assert old.backward.nodes and not old.backward.grads and not old.backward.param_grads


@pytest.mark.parametrize("reentrant", [False, True])
def test_checkpointed_llama_counts_exactly_each_layer_input_that_checkpoint_keeps(reentrant):
    from tracer.backward.memory import layer_table

    model, args, kwargs = _llama(False, True)
    model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": reentrant})
    loss = lambda o: o.logits.sum()  # noqa: E731
    plain = _plain_grads(model, args, loss, kwargs)
    total = _hand_counted_bytes(copy.deepcopy(model), args, kwargs)  # the same mode and config, by hand
    t = tracer.trace(model, args, kwargs, capture=BACKWARD, loss=loss)
    bw = t.backward
    assert plain.keys() == {n for n, p in model.named_parameters()}
    assert all(torch.equal(p.grad, plain[n]) for n, p in model.named_parameters())
    assert sum(s.bytes for rows in bw.saved.values() for s in rows) == total
    # Per checkpointed layer: one tensor, the layer's input hidden states (batch x sequence x hidden, float32),
    # saved by torch.utils.checkpoint for the recomputation, at the layer's first op.
    stack = {op.label: op.module_stack for op in t.ops}
    for i in range(2):
        rows = [s for label, saved in bw.saved.items() for s in saved
                if any(a == f"model.layers.{i}" for a, _ in stack[label])]
        assert [(s.shape, s.dtype, s.bytes) for s in rows] == [((1, 16, 64), "float32", 16 * 64 * 4)]
    assert [r.saved_bytes for r in layer_table(t).rows[:2]] == [16 * 64 * 4] * 2
    assert any("torch.utils.checkpoint saves for that are counted" in n for n in bw.notes)
    checkpoint_nodes = sum(n.name == "CheckpointFunctionBackward" for n in bw.nodes)
    assert checkpoint_nodes == (2 if reentrant else 0)
    assert "model.layers.0.mlp.down_proj" in bw.recomputed  # the layer's forward is checkpointed inside its call


_OFFLINE_CHECK = """
import json, sys
import tracer
from tests.tracer.test_backward import _gpt2
from tracer.backward.offline import validate_backward_offline
trace = tracer.load(sys.argv[1])
model = _gpt2()  # the same seed: the same weights, supplied as the parameters (a trace holds none)
def summary(report):
    return {"ok": bool(report), "checked": report.checked, "findings": sorted(report.findings)}
clean = validate_backward_offline(trace, params=model)
# then a wrong gradient planted in what was loaded: a tanh's, one the clean check recomputed
planted = next(op.label for op in trace.ops if op.func.endswith("tanh") and op.label in clean.checked)
trace.backward.grads[planted].mul_(1.01)
bad = validate_backward_offline(trace, params=model)
print(json.dumps({"clean": summary(clean), "planted": planted, "bad": summary(bad),
                  "params": sorted(n for n, _ in model.named_parameters())}))
"""


def test_a_saved_backward_is_checked_offline_in_a_fresh_process(tmp_path):
    import json
    import os
    import subprocess
    import sys

    from tracer.backward.offline import validate_backward_offline
    from tracer.errors import ReplayUnavailableError

    model, ids = _gpt2(), torch.randint(0, 128, (1, 16))
    t = tracer.trace(model, (ids,), capture=BACKWARD, loss=lambda o: o.logits.sum())
    folder = str(t.save(str(tmp_path / "gpt2")))
    env = {**os.environ, "PYTHONPATH": os.getcwd()}

    run = subprocess.run([sys.executable, "-c", _OFFLINE_CHECK, folder], capture_output=True, text=True,
                         env=env, timeout=300, check=True)  # one process: the clean check, then a planted one
    out = json.loads(run.stdout.strip().splitlines()[-1])
    clean, bad, planted = out["clean"], out["bad"], out["planted"]
    assert clean["ok"] and not clean["findings"]
    # every parameter's gradient is recomputed and matches, and most op-output gradients too
    assert {f"param:{n}" for n in out["params"]} - {"param:lm_head.weight"} <= set(clean["checked"])
    assert len([k for k in clean["checked"] if not k.startswith("param:")]) > 50
    assert planted == next(op.label for op in t.ops if op.func.endswith("tanh") and op.label in clean["checked"])
    assert not bad["ok"] and planted in bad["findings"]
    with pytest.raises(ReplayUnavailableError):  # a trace without saved gradients has nothing to check
        validate_backward_offline(tracer.load(tracer.trace(model, (ids,)).save(str(tmp_path / "fwd"))))


_AFTER_AN_EARLIER_CAPTURE = """
import torch, tracer
from torch import nn
from tests.tracer.test_backward import _llama, BACKWARD
tracer.trace(nn.Sequential(nn.Linear(4, 4), nn.ReLU()), (torch.randn(2, 4),))  # installs the Function.apply pass-through
model, args, kwargs = _llama(False, True)
model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": True})
t = tracer.trace(model, args, kwargs, capture=BACKWARD, loss=lambda o: o.logits.sum())
stack = {op.label: [a for a, _ in op.module_stack] for op in t.ops}
print(sorted({a for label, saved in t.backward.saved.items() for s in saved if s.shape == (1, 16, 64)
              for a in stack[label] if a.startswith("model.layers.") and a.count(".") == 2}))
"""


def test_reentrant_checkpoint_inputs_stay_with_their_layer_after_an_earlier_capture():
    """Regression: in a fresh process whose first capture ran before the backward module was imported, a
    reentrant checkpoint's saved input is still counted at its own layer (not the op after the region)."""
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    out = subprocess.run([sys.executable, "-c", _AFTER_AN_EARLIER_CAPTURE], cwd=root, capture_output=True, text=True,
                         timeout=300, check=True).stdout.strip().splitlines()[-1]
    assert out == "['model.layers.0', 'model.layers.1']"
