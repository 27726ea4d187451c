"""The torch.nn sweep: every public layer class that takes tensors, with a generated input.

`LAYERS` is the table (class name -> constructor arguments, input builder); `SKIPPED` names the
classes left out and why. A test checks that the two together cover every public Module class.
"""
from __future__ import annotations

import contextlib
from typing import Any, Callable

import torch
from torch import nn

from .compare import bit_equal
from .outcome import failed, run_column

VARIANTS = ("train", "train_no_grad", "eval", "eval_no_grad")
COLUMNS = ("capture", "validate")


def _r(*shape: int) -> Callable[[torch.Generator], tuple]:
    return lambda g: (torch.randn(*shape, generator=g),)


def _prob(*shape: int) -> Callable[[torch.Generator], tuple]:
    return lambda g: (torch.rand(*shape, generator=g) * 0.9 + 0.05, torch.rand(*shape, generator=g).round())


def _pair(*shape: int) -> Callable[[torch.Generator], tuple]:
    return lambda g: (torch.randn(*shape, generator=g), torch.randn(*shape, generator=g))


def _classes(g: torch.Generator) -> tuple:
    return torch.randn(4, 5, generator=g), torch.randint(0, 5, (4,), generator=g)


def _unpool(dim: int) -> Callable[[torch.Generator], tuple]:
    def make(g: torch.Generator) -> tuple:
        x = torch.randn(1, 2, *([4] * dim), generator=g)
        pool = (nn.functional.max_pool1d, nn.functional.max_pool2d, nn.functional.max_pool3d)[dim - 1]
        out, idx = pool(x, 2, return_indices=True)
        return out, idx
    return make


def _classes_of_features(g: torch.Generator) -> tuple:
    return torch.randn(4, 8, generator=g), torch.randint(0, 5, (4,), generator=g)


def _seq_pair(g: torch.Generator) -> tuple:
    return torch.randn(2, 5, 16, generator=g), torch.randn(2, 3, 16, generator=g)


LOSS_2D = _pair(4, 5)
# class name -> (constructor args, constructor kwargs, input builder)
LAYERS: dict[str, tuple[tuple, dict, Callable[[torch.Generator], tuple]]] = {
    **{f"AdaptiveAvgPool{d}d": ((2,), {}, _r(1, 3, *([6] * d))) for d in (1, 2, 3)},
    **{f"AdaptiveMaxPool{d}d": ((2,), {}, _r(1, 3, *([6] * d))) for d in (1, 2, 3)},
    "AdaptiveLogSoftmaxWithLoss": ((8, 10, [4, 8]), {}, lambda g: (torch.randn(4, 8, generator=g),
                                                                   torch.randint(0, 10, (4,), generator=g))),
    **{f"AvgPool{d}d": ((2,), {}, _r(1, 3, *([4] * d))) for d in (1, 2, 3)},
    **{f"MaxPool{d}d": ((2,), {}, _r(1, 3, *([4] * d))) for d in (1, 2, 3)},
    **{f"LPPool{d}d": ((2, 2), {}, _r(1, 3, *([4] * d))) for d in (1, 2, 3)},
    **{f"MaxUnpool{d}d": ((2,), {}, _unpool(d)) for d in (1, 2, 3)},
    "FractionalMaxPool2d": ((2,), {"output_size": 3}, _r(1, 3, 6, 6)),
    "FractionalMaxPool3d": ((2,), {"output_size": 3}, _r(1, 3, 6, 6, 6)),
    **{f"BatchNorm{d}d": ((3,), {}, _r(4, 3, *([4] * (d if d > 1 else 0)))) for d in (1, 2, 3)},
    **{f"LazyBatchNorm{d}d": ((), {}, _r(4, 3, *([4] * (d if d > 1 else 0)))) for d in (1, 2, 3)},
    **{f"InstanceNorm{d}d": ((3,), {"affine": True, "track_running_stats": True}, _r(2, 3, *([5] * d)))
       for d in (1, 2, 3)},
    **{f"LazyInstanceNorm{d}d": ((), {}, _r(2, 3, *([5] * d))) for d in (1, 2, 3)},
    **{f"Conv{d}d": ((3, 4, 3), {}, _r(1, 3, *([6] * d))) for d in (1, 2, 3)},
    **{f"ConvTranspose{d}d": ((3, 4, 3), {}, _r(1, 3, *([4] * d))) for d in (1, 2, 3)},
    **{f"LazyConv{d}d": ((4, 3), {}, _r(1, 3, *([6] * d))) for d in (1, 2, 3)},
    **{f"LazyConvTranspose{d}d": ((4, 3), {}, _r(1, 3, *([4] * d))) for d in (1, 2, 3)},
    **{f"{kind}Pad{d}d": ((1,), {}, _r(1, 2, *([4] * d))) for kind in ("Circular", "Reflection", "Replication", "Zero")
       for d in (1, 2, 3)},
    **{f"ConstantPad{d}d": ((1, 0.5), {}, _r(1, 2, *([4] * d))) for d in (1, 2, 3)},
    "Bilinear": ((6, 5, 4), {}, lambda g: (torch.randn(3, 6, generator=g), torch.randn(3, 5, generator=g))),
    "Linear": ((8, 4), {}, _r(3, 8)),
    "LazyLinear": ((4,), {}, _r(3, 8)),
    "Identity": ((), {}, _r(3, 4)),
    "Embedding": ((10, 4), {}, lambda g: (torch.randint(0, 10, (2, 5), generator=g),)),
    "EmbeddingBag": ((10, 4), {"mode": "mean"}, lambda g: (torch.randint(0, 10, (2, 5), generator=g),)),
    **{name: ((), {}, _r(3, 6)) for name in (
        "CELU", "ELU", "GELU", "Hardshrink", "Hardsigmoid", "Hardswish", "Hardtanh", "LeakyReLU", "LogSigmoid",
        "Mish", "PReLU", "RReLU", "ReLU", "ReLU6", "SELU", "SiLU", "Sigmoid", "Softplus", "Softshrink", "Softsign",
        "Tanh", "Tanhshrink", "AlphaDropout", "FeatureAlphaDropout", "Dropout", "Flatten")},
    "GLU": ((), {}, _r(3, 6)),
    "Threshold": ((0.1, 20.0), {}, _r(3, 6)),
    **{name: ((), {"dim": 1}, _r(3, 6)) for name in ("Softmax", "Softmin", "LogSoftmax")},
    "Softmax2d": ((), {}, _r(1, 3, 4, 4)),
    "Dropout1d": ((), {}, _r(2, 3, 6)),
    "Dropout2d": ((), {}, _r(2, 3, 4, 4)),
    "Dropout3d": ((), {}, _r(2, 3, 2, 4, 4)),
    "ChannelShuffle": ((2,), {}, _r(1, 4, 3, 3)),
    "PixelShuffle": ((2,), {}, _r(1, 8, 3, 3)),
    "PixelUnshuffle": ((2,), {}, _r(1, 2, 4, 4)),
    "Unflatten": ((1, (2, 3)), {}, _r(4, 6)),
    "Fold": (((4, 4), (2, 2)), {}, _r(1, 12, 9)),
    "Unfold": (((2, 2),), {}, _r(1, 3, 4, 4)),
    "Upsample": ((), {"scale_factor": 2, "mode": "nearest"}, _r(1, 2, 3, 3)),
    "UpsamplingBilinear2d": ((), {"scale_factor": 2}, _r(1, 2, 3, 3)),
    "UpsamplingNearest2d": ((), {"scale_factor": 2}, _r(1, 2, 3, 3)),
    "GroupNorm": ((2, 4), {}, _r(2, 4, 3, 3)),
    "LayerNorm": ((6,), {}, _r(3, 6)),
    "RMSNorm": ((6,), {}, _r(3, 6)),
    "LocalResponseNorm": ((2,), {}, _r(1, 4, 3, 3)),
    "CrossMapLRN2d": ((3,), {}, _r(1, 4, 3, 3)),
    "CosineSimilarity": ((), {}, _pair(3, 6)),
    "PairwiseDistance": ((), {}, _pair(3, 6)),
    "RNN": ((8, 16), {"num_layers": 2}, _r(5, 2, 8)),
    "LSTM": ((8, 16), {"num_layers": 2}, _r(5, 2, 8)),
    "GRU": ((8, 16), {"num_layers": 2, "bidirectional": True}, _r(5, 2, 8)),
    "RNNCell": ((8, 16), {}, _r(3, 8)),
    "LSTMCell": ((8, 16), {}, _r(3, 8)),
    "GRUCell": ((8, 16), {}, _r(3, 8)),
    "MultiheadAttention": ((32, 4), {"batch_first": True},
                           lambda g: (torch.randn(2, 5, 32, generator=g),) * 3),
    "TransformerEncoderLayer": ((16, 4), {"dim_feedforward": 32, "batch_first": True}, _r(2, 5, 16)),
    "TransformerDecoderLayer": ((16, 4), {"dim_feedforward": 32, "batch_first": True}, _seq_pair),
    "TransformerEncoder": ((), {}, _r(2, 5, 16)),
    "TransformerDecoder": ((), {}, _seq_pair),
    "Transformer": ((16, 4, 1, 1, 32), {"batch_first": True}, _seq_pair),
    # losses: (input, target)
    **{name: ((), {}, LOSS_2D) for name in ("L1Loss", "MSELoss", "HuberLoss", "SmoothL1Loss", "SoftMarginLoss",
                                            "MultiLabelSoftMarginLoss", "BCEWithLogitsLoss")},
    "BCELoss": ((), {}, _prob(4, 5)),
    "KLDivLoss": ((), {"reduction": "batchmean"}, lambda g: (torch.randn(4, 5, generator=g).log_softmax(-1),
                                                             torch.rand(4, 5, generator=g).softmax(-1))),
    "PoissonNLLLoss": ((), {}, LOSS_2D),
    "GaussianNLLLoss": ((), {}, lambda g: (torch.randn(4, 5, generator=g), torch.randn(4, 5, generator=g),
                                           torch.rand(4, 5, generator=g) + 0.1)),
    "CrossEntropyLoss": ((), {}, _classes),
    "NLLLoss": ((), {}, _classes),
    "NLLLoss2d": ((), {}, lambda g: (torch.randn(2, 5, 3, 3, generator=g), torch.randint(0, 5, (2, 3, 3), generator=g))),
    "MultiMarginLoss": ((), {}, _classes),
    "MultiLabelMarginLoss": ((), {}, lambda g: (torch.randn(4, 5, generator=g),
                                                torch.tensor([[3, 0, -1, 1, 0]] * 4))),
    "HingeEmbeddingLoss": ((), {}, lambda g: (torch.randn(4, 5, generator=g), torch.randint(0, 2, (4, 5), generator=g) * 2 - 1)),
    "MarginRankingLoss": ((), {}, lambda g: (torch.randn(4, generator=g), torch.randn(4, generator=g),
                                             torch.randint(0, 2, (4,), generator=g) * 2 - 1)),
    "CosineEmbeddingLoss": ((), {}, lambda g: (torch.randn(4, 5, generator=g), torch.randn(4, 5, generator=g),
                                               torch.randint(0, 2, (4,), generator=g) * 2 - 1)),
    "TripletMarginLoss": ((), {}, lambda g: tuple(torch.randn(4, 5, generator=g) for _ in range(3))),
    "TripletMarginWithDistanceLoss": ((), {}, lambda g: tuple(torch.randn(4, 5, generator=g) for _ in range(3))),
    "CTCLoss": ((), {}, lambda g: (torch.randn(6, 2, 5, generator=g).log_softmax(2),
                                   torch.randint(1, 5, (2, 3), generator=g), torch.tensor([6, 6]),
                                   torch.tensor([3, 2]))),
    "LinearCrossEntropyLoss": ((8, 5), {}, _classes_of_features),
}
SKIPPED = {
    "Module": "abstract base class",
    "Container": "deprecated abstract container",
    "Sequential": "container: its children are swept one by one",
    "ModuleList": "container without a forward",
    "ModuleDict": "container without a forward",
    "ParameterList": "container without a forward",
    "ParameterDict": "container without a forward",
    "RNNBase": "abstract base of RNN/LSTM/GRU (swept as those)",
    "RNNCellBase": "abstract base of RNNCell/LSTMCell/GRUCell (swept as those)",
    "DataParallel": "a wrapper that replicates across devices; one CPU here",
    "SyncBatchNorm": "needs a distributed process group (refused without one by torch)",
}


def public_layers() -> list[str]:
    """Every public class in `torch.nn` that is an `nn.Module`, sorted."""
    return sorted(n for n in dir(nn) if not n.startswith("_") and isinstance(getattr(nn, n), type)
                  and issubclass(getattr(nn, n), nn.Module))


def build_layer(name: str) -> nn.Module:
    """The layer `name` from the table, with seeded random parameters."""
    args, kwargs, _ = LAYERS[name]
    torch.manual_seed(0)
    if name == "TransformerEncoder":
        return nn.TransformerEncoder(nn.TransformerEncoderLayer(16, 4, 32, batch_first=True), 2,
                                     enable_nested_tensor=False)
    if name == "TransformerDecoder":
        return nn.TransformerDecoder(nn.TransformerDecoderLayer(16, 4, 32, batch_first=True), 2)
    layer = getattr(nn, name)(*args, **kwargs)
    if name.startswith("Lazy"):
        layer(*layer_inputs(name))  # materialize the lazy parameters once
    return layer


def layer_inputs(name: str) -> tuple:
    """Seeded inputs for layer `name`."""
    return LAYERS[name][2](torch.Generator().manual_seed(1))


def sweep_layer(name: str) -> dict[str, Any]:
    """The capture and validate columns for `name` in each variant (train/eval, with/without grad)."""
    row: dict[str, Any] = {"layer": name}
    for variant in VARIANTS:
        state: dict[str, Any] = {}

        def capture(variant=variant, state=state):
            import tracer

            layer = build_layer(name).train(variant.startswith("train"))
            inputs = layer_inputs(name)
            grad = torch.no_grad() if variant.endswith("no_grad") else contextlib.nullcontext()
            with grad:
                torch.manual_seed(0)
                plain = layer(*inputs)
                layer = build_layer(name).train(variant.startswith("train"))  # fresh buffers for the capture
                torch.manual_seed(0)
                state["trace"] = t = tracer.trace(layer, inputs)
            if not bit_equal(t.output, plain):
                return failed("output_not_bit_equal", "the traced output differs from the plain forward")

        def validate(state=state):
            from tracer.replay.validate import validation_report

            report = validation_report(state["trace"])
            if not report.passed:
                first = report.findings[0]
                return failed("validation_failed", f"[{first.check}] {first.label}: {first.message}")

        row[f"{variant}.capture"] = run_column(capture)
        row[f"{variant}.validate"] = run_column(validate) if "trace" in state else \
            {"result": "skipped", "reason": "needs capture"}
    return row
