"""One small real case per PyTorch feature: a tiny nn.Module built inline, its inputs, and what to expect.

Each `Case` builds its model on a device ("cpu" or "meta", seeded), its inputs, and names the plain
eager twin whose parameter reads the sweep observes independently of the tracer (`eager`), the op
kinds the trace must hold (`expect`), and whether the twin's recorded kinds must match
(`match_kinds`: a wrapper such as `torch.compile` must record the computation it wraps).
"""
from __future__ import annotations

import contextlib
import threading
from dataclasses import dataclass, field
from typing import Any, Callable, ContextManager

import torch
from torch import nn

Builder = Callable[[str], nn.Module]


@dataclass(frozen=True)
class Case:
    """One row of the sweep."""

    name: str
    feature: str  # the group the row belongs to in docs/torch-features.md
    what: str  # one line: what the case runs
    build: Builder  # device -> model, seeded
    inputs: Callable[[str], tuple]  # device -> positional inputs, seeded
    eager: Builder | None = None  # the plain twin observed for parameter reads (default: `build`)
    match_kinds: bool = False  # the trace's op kinds must equal the eager twin's trace
    expect: tuple[str, ...] = ()  # substrings of op kinds/functions the trace must record
    context: Callable[[], ContextManager] = contextlib.nullcontext  # entered around build, forward, capture
    compare: str = "bits"  # "bits": bit-equal outputs; "meta": shapes and dtypes only (fake tensors)
    weights_free: str = ""  # non-empty: why the weights-free column is not meaningful for this row
    concurrency: str = ""  # "" | "threads" | "processes": two subjects captured at once
    limit_s: float = 90.0
    tags: tuple[str, ...] = field(default_factory=tuple)


def _seeded(make: Callable[[], nn.Module]) -> Builder:
    def build(device: str) -> nn.Module:
        torch.manual_seed(0)
        with torch.device(device):
            return make().eval()
    return build


def _randn(*shape: int, dtype: torch.dtype = torch.float32) -> Callable[[str], tuple]:
    def make(device: str) -> tuple:
        x = torch.randn(*shape, generator=torch.Generator().manual_seed(1), dtype=dtype)
        return (x.to(device),)
    return make


class MLP(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc1, self.fc2 = nn.Linear(8, 16), nn.Linear(16, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(torch.relu(self.fc1(x)))


class SmallConv(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv, self.fc = nn.Conv2d(3, 4, 3), nn.Linear(4, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(self.conv(x).mean((2, 3)))


class Rendezvous:
    """A barrier the two-thread row's forwards meet at between their layers (None outside that row), so
    the two captures are certainly running at the same moment."""

    barrier: threading.Barrier | None = None

    @classmethod
    def meet(cls) -> None:
        if cls.barrier is not None:
            cls.barrier.wait()


class MeetingMLP(MLP):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = torch.relu(self.fc1(x))
        Rendezvous.meet()
        return self.fc2(h)


class MeetingConv(SmallConv):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.conv(x)
        Rendezvous.meet()
        return self.fc(h.mean((2, 3)))


MLP_IN = _randn(3, 8)
CONV_IN = _randn(1, 3, 6, 6)
mlp = _seeded(MLP)
conv = _seeded(SmallConv)


def _wrapped(wrap: Callable[[nn.Module, str], nn.Module], base: Builder = mlp) -> Builder:
    return lambda device: wrap(base(device), device)


def _compiled(backend: str) -> Builder:
    def wrap(m: nn.Module, device: str) -> nn.Module:
        torch._dynamo.reset()
        return torch.compile(m, backend=backend)
    return _wrapped(wrap)


def _exported(m: nn.Module, device: str) -> nn.Module:
    return torch.export.export(m, MLP_IN(device)).module()


# -- torch.func and higher-order ops inside a forward ------------------------------------------------

class FuncVmap(MLP):
    def forward(self, x):
        return torch.func.vmap(lambda row: self.fc2(torch.relu(self.fc1(row))))(x)


class FuncGrad(MLP):
    def forward(self, x):
        return torch.func.grad(lambda inp: self.fc2(torch.relu(self.fc1(inp))).square().sum())(x)


class FuncJacrev(MLP):
    def forward(self, x):
        return torch.func.jacrev(lambda inp: self.fc2(torch.relu(self.fc1(inp))))(x[0])


class FuncFunctionalCall(MLP):
    def forward(self, x):
        state = {k: v * 0.5 for k, v in self.fc1.named_parameters()}
        return self.fc2(torch.relu(torch.func.functional_call(self.fc1, state, (x,))))


class Cond(MLP):
    def forward(self, x):
        h = self.fc1(x)
        return self.fc2(torch.cond(h.sum() > 0, lambda t: torch.relu(t), lambda t: torch.sigmoid(t), (h,)))


class WhileLoop(MLP):
    def forward(self, x):
        from torch._higher_order_ops.while_loop import while_loop

        h = self.fc1(x)
        _, out = while_loop(lambda i, t: i < 3, lambda i, t: (i + 1, torch.tanh(t) * 0.9),
                            (torch.zeros((), dtype=torch.int64, device=x.device), h))
        return self.fc2(out)


class HopMap(MLP):
    def forward(self, x):
        from torch._higher_order_ops.map import map as hop_map

        return self.fc2(hop_map(lambda row, w: torch.relu(row * w), self.fc1(x), self.fc1.bias.sum()))


class FlexAttention(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.qkv = nn.Linear(16, 48)

    def forward(self, x):
        from torch.nn.attention.flex_attention import flex_attention

        q, k, v = self.qkv(x).view(1, 8, 3, 2, 8).permute(2, 0, 3, 1, 4)
        return flex_attention(q, k, v, score_mod=lambda s, b, h, qi, ki: s + (qi - ki) * 0.1)


# -- tensor layouts and dtypes -----------------------------------------------------------------------

class SparseWeight(nn.Module):
    """A dense Linear after a sparse matrix product with a sparse weight buffer of a given layout."""

    def __init__(self, layout: str, n: int) -> None:
        super().__init__()
        g = torch.Generator().manual_seed(2)
        dense = torch.randn(n, n, generator=g) * (torch.rand(n, n, generator=g) < 0.05)
        dense = dense + torch.eye(n)
        sparse = {"coo": lambda: dense.to_sparse(), "csr": lambda: dense.to_sparse_csr(),
                  "bsr": lambda: dense.to_sparse_bsr((4, 4))}[layout]()
        self.register_buffer("w", sparse)
        self.fc = nn.Linear(n, 4)

    def forward(self, x):
        product = torch.sparse.mm(self.w, x.t()) if self.w.layout == torch.sparse_coo else self.w @ x.t()
        return self.fc(product.t())


def _sparse(layout: str, n: int) -> Builder:
    def build(device: str) -> nn.Module:
        torch.manual_seed(0)
        m = SparseWeight(layout, n)  # sparse construction on the CPU, then moved
        return m.to(device).eval()
    return build


class Fp8(nn.Module):
    def __init__(self, dtype: torch.dtype) -> None:
        super().__init__()
        self.fc = nn.Linear(8, 4)
        self.register_buffer("w8", (torch.randn(8, 8) * 0.5).to(dtype))

    def forward(self, x):
        return self.fc(x @ self.w8.to(torch.float32)) + self.fc.weight.to(self.w8.dtype).float().sum()


class Complex(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.w = nn.Parameter(torch.randn(8, dtype=torch.complex64))
        self.fc = nn.Linear(8, 4)

    def forward(self, x):
        spec = torch.fft.fft(x.to(torch.complex64)) * self.w
        return self.fc(torch.fft.ifft(spec).real + spec.abs())


class Jagged(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(8, 4)

    def forward(self, nt):
        return torch.relu(self.fc(nt))


def _jagged(device: str) -> tuple:
    g = torch.Generator().manual_seed(1)
    parts = [torch.randn(n, 8, generator=g).to(device) for n in (2, 5, 3)]
    return (torch.nested.nested_tensor(parts, layout=torch.jagged),)


class LoggedTensor(torch.Tensor):
    """A user wrapper subclass: every aten call unwraps, runs, and rewraps (and is counted)."""

    calls = 0

    @staticmethod
    def __new__(cls, elem: torch.Tensor):
        return torch.Tensor._make_wrapper_subclass(cls, elem.shape, dtype=elem.dtype, device=elem.device,
                                                   requires_grad=elem.requires_grad)

    def __init__(self, elem: torch.Tensor) -> None:
        self.elem = elem

    @classmethod
    def __torch_dispatch__(cls, func, types, args=(), kwargs=None):
        LoggedTensor.calls += 1
        unwrap = lambda t: t.elem if isinstance(t, LoggedTensor) else t  # noqa: E731
        out = func(*torch.utils._pytree.tree_map(unwrap, args), **torch.utils._pytree.tree_map(unwrap, kwargs or {}))
        return torch.utils._pytree.tree_map(lambda t: LoggedTensor(t) if isinstance(t, torch.Tensor) else t, out)

    def __repr__(self) -> str:
        return f"LoggedTensor({self.elem!r})"


def _logged(device: str) -> tuple:
    return (LoggedTensor(MLP_IN(device)[0]),)


# -- quantization --------------------------------------------------------------------------------------

def _dynamic_quant(device: str) -> nn.Module:
    m = mlp("cpu")
    q = torch.ao.quantization.quantize_dynamic(m, {nn.Linear}, dtype=torch.qint8)
    return q.to(device)


class StaticQ(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.quant, self.dequant = torch.ao.quantization.QuantStub(), torch.ao.quantization.DeQuantStub()
        self.fc1, self.relu, self.fc2 = nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4)

    def forward(self, x):
        return self.dequant(self.fc2(self.relu(self.fc1(self.quant(x)))))


def _static_quant(device: str) -> nn.Module:
    torch.manual_seed(0)
    m = StaticQ().eval()
    torch.backends.quantized.engine = "x86" if "x86" in torch.backends.quantized.supported_engines else "qnnpack"
    m.qconfig = torch.ao.quantization.get_default_qconfig(torch.backends.quantized.engine)
    prepared = torch.ao.quantization.prepare(m)
    prepared(torch.randn(16, 8, generator=torch.Generator().manual_seed(3)))
    return torch.ao.quantization.convert(prepared).to(device)


# -- checkpointing, hooks ------------------------------------------------------------------------------

class Checkpointed(MLP):
    def __init__(self, reentrant: bool) -> None:
        super().__init__()
        self.reentrant = reentrant

    def forward(self, x):
        from torch.utils.checkpoint import checkpoint

        h = checkpoint(lambda t: torch.relu(self.fc1(t)), x, use_reentrant=self.reentrant)
        return self.fc2(h)


def _checkpoint_in(device: str) -> tuple:
    return (MLP_IN(device)[0].requires_grad_(True),)


def _forward_hooked(m: nn.Module, device: str) -> nn.Module:
    m.fc1.register_forward_hook(lambda mod, args, out: out * 2.0)
    m.fc2.register_forward_pre_hook(lambda mod, args: (args[0] + 1.0,))
    return m


class TensorHooked(MLP):
    def forward(self, x):
        h = torch.relu(self.fc1(x))
        if h.requires_grad:
            h.register_hook(lambda g: g * 3.0)
        return self.fc2(h)


@contextlib.contextmanager
def _global_hooks():
    from torch.nn.modules import module as nn_module

    handles = [nn_module.register_module_forward_hook(
                   lambda mod, args, out: out.tanh() if isinstance(mod, nn.Linear) else None),
               nn_module.register_module_forward_pre_hook(
                   lambda mod, args: (args[0] * 0.5,) if isinstance(mod, nn.Linear) else None)]
    try:
        yield
    finally:
        for h in handles:
            h.remove()


class NestedTrace(MLP):
    """A forward that captures another, unregistered module with tracer.trace and does not use it."""

    def __init__(self) -> None:
        super().__init__()
        self._other = [nn.Linear(8, 3)]  # a list: not a submodule of this model

    def forward(self, x):
        import tracer

        tracer.trace(self._other[0], (x,))
        return super().forward(x)


class PlainInnerCall(NestedTrace):
    """The reference for NestedTrace: the same forward calling the other module plainly. Its forward is
    computation the outer forward really ran, so the outer trace holds its ops; only the inner capture's
    own machinery must be absent."""

    def forward(self, x):
        self._other[0](x)
        return MLP.forward(self, x)


def _autocast() -> ContextManager:
    return torch.autocast("cpu", dtype=torch.bfloat16)


def _fake_mode() -> ContextManager:
    from torch._subclasses.fake_tensor import FakeTensorMode

    return FakeTensorMode()


def _script(m: nn.Module, device: str) -> nn.Module:
    return torch.jit.script(m)


def _jit_trace(m: nn.Module, device: str) -> nn.Module:
    return torch.jit.trace(m, MLP_IN(device))


LINEAR = ("linear",)
CASES: tuple[Case, ...] = (
    Case("eager_mlp", "baseline", "a plain 2-layer MLP (the reference row)", mlp, MLP_IN, expect=LINEAR),
    Case("compile_eager", "torch.compile", "torch.compile(mlp, backend='eager')", _compiled("eager"), MLP_IN,
         eager=mlp, match_kinds=True, expect=LINEAR),
    Case("compile_aot_eager", "torch.compile", "torch.compile(mlp, backend='aot_eager')", _compiled("aot_eager"),
         MLP_IN, eager=mlp, match_kinds=True, expect=LINEAR),
    Case("compile_inductor", "torch.compile", "torch.compile(mlp, backend='inductor') (C++ codegen with gcc)",
         _compiled("inductor"), MLP_IN, eager=mlp, match_kinds=True, expect=LINEAR, limit_s=400.0),
    Case("export_module", "torch.export", "torch.export.export(mlp, (x,)).module() (a GraphModule of aten ops)",
         _wrapped(_exported), MLP_IN, eager=mlp),
    Case("jit_script", "torch.jit", "torch.jit.script(mlp)", _wrapped(_script), MLP_IN, eager=mlp),
    Case("jit_trace", "torch.jit", "torch.jit.trace(mlp, (x,))", _wrapped(_jit_trace), MLP_IN, eager=mlp),
    Case("func_vmap", "torch.func", "torch.func.vmap over the MLP's rows inside forward", _seeded(FuncVmap),
         MLP_IN, expect=LINEAR),
    Case("func_grad", "torch.func", "torch.func.grad of the MLP's squared output w.r.t. its input",
         _seeded(FuncGrad), MLP_IN, expect=LINEAR),
    Case("func_jacrev", "torch.func", "torch.func.jacrev of the MLP at one row", _seeded(FuncJacrev), MLP_IN,
         expect=LINEAR),
    Case("func_functional_call", "torch.func", "torch.func.functional_call of fc1 with halved parameters",
         _seeded(FuncFunctionalCall), MLP_IN, expect=LINEAR),
    Case("hop_cond", "higher-order ops", "torch.cond on the sign of fc1's output (relu / sigmoid branches)",
         _seeded(Cond), MLP_IN, expect=LINEAR),
    Case("hop_while_loop", "higher-order ops", "torch._higher_order_ops.while_loop: 3 tanh steps",
         _seeded(WhileLoop), MLP_IN, expect=LINEAR),
    Case("hop_map", "higher-order ops", "torch._higher_order_ops.map over fc1's rows", _seeded(HopMap), MLP_IN,
         expect=LINEAR),
    Case("flex_attention", "higher-order ops", "flex_attention with a relative-position score_mod (no_grad: "
         "torch has no CPU backward for it)", _seeded(FlexAttention), _randn(1, 8, 16), context=torch.no_grad,
         expect=LINEAR),
    *(Case(f"sparse_{layout}_{size}", "sparse", f"a {layout.upper()} weight buffer ({n}x{n}, about 5% dense) "
           f"times the input, then a Linear", _sparse(layout, n), _randn(3, n), expect=LINEAR)
      for layout in ("coo", "csr", "bsr") for size, n in (("small", 8), ("large", 512))),
    Case("ao_dynamic_quant", "torch.ao quantization", "quantize_dynamic(mlp, {Linear}, qint8)", _dynamic_quant,
         MLP_IN, eager=_dynamic_quant, expect=LINEAR),
    Case("ao_static_quant", "torch.ao quantization", "eager-mode static quantization (prepare, calibrate, convert)",
         _static_quant, MLP_IN, eager=_static_quant, expect=LINEAR),
    Case("fp8_e4m3fn", "dtypes", "a float8_e4m3fn buffer upcast in forward, a weight cast to fp8",
         _seeded(lambda: Fp8(torch.float8_e4m3fn)), MLP_IN, expect=LINEAR),
    Case("fp8_e5m2", "dtypes", "a float8_e5m2 buffer upcast in forward, a weight cast to fp8",
         _seeded(lambda: Fp8(torch.float8_e5m2)), MLP_IN, expect=LINEAR),
    Case("complex64", "dtypes", "fft, a complex64 parameter, ifft, then a Linear", _seeded(Complex), MLP_IN,
         expect=("fft", "linear")),
    Case("nested_jagged", "tensor subclasses", "a jagged nested tensor (3 rows of 2/5/3) through Linear and relu",
         _seeded(Jagged), _jagged, expect=LINEAR),
    Case("fake_tensor_mode", "tensor subclasses", "model, inputs and capture all under FakeTensorMode", mlp, MLP_IN,
         context=_fake_mode, compare="meta", expect=LINEAR,
         weights_free="the row is about the fake substrate; on meta it is the baseline row"),
    Case("dispatch_subclass", "tensor subclasses", "a user wrapper subclass with __torch_dispatch__ as the input",
         mlp, _logged, expect=LINEAR),
    Case("autocast_cpu_bf16", "modes", "torch.autocast('cpu', bfloat16) around the forward", mlp, MLP_IN,
         context=_autocast, expect=LINEAR),
    Case("inference_mode", "modes", "torch.inference_mode() around the forward", mlp, MLP_IN,
         context=torch.inference_mode, expect=LINEAR),
    Case("no_grad", "modes", "torch.no_grad() around the forward", mlp, MLP_IN, context=torch.no_grad, expect=LINEAR),
    Case("checkpoint_reentrant", "activation checkpointing", "torch.utils.checkpoint(use_reentrant=True) on fc1+relu",
         _seeded(lambda: Checkpointed(True)), _checkpoint_in, expect=LINEAR),
    Case("checkpoint_non_reentrant", "activation checkpointing",
         "torch.utils.checkpoint(use_reentrant=False) on fc1+relu", _seeded(lambda: Checkpointed(False)),
         _checkpoint_in, expect=LINEAR),
    Case("module_hooks", "hooks", "a forward hook doubling fc1's output, a pre-hook adding 1 to fc2's input",
         _wrapped(_forward_hooked), MLP_IN, expect=("linear", "mul", "add")),
    Case("tensor_hook", "hooks", "a gradient hook registered on a forward intermediate (input requires grad; "
         "forward captured)",
         _seeded(TensorHooked), _checkpoint_in, expect=LINEAR),
    Case("global_hooks", "hooks", "global module forward and pre hooks (tanh after, halve before every Linear)",
         mlp, MLP_IN, context=_global_hooks, expect=("linear", "tanh", "mul")),
    Case("two_threads", "concurrency", "two threads capturing an MLP and a small CNN at the same time (their "
         "forwards meet at a barrier between layers)", _seeded(MeetingMLP), MLP_IN, concurrency="threads",
         expect=LINEAR),
    Case("two_processes", "concurrency", "two forked processes capturing an MLP and a small CNN at the same time",
         mlp, MLP_IN, concurrency="processes", expect=LINEAR),
    Case("nested_trace", "nesting", "a forward that runs tracer.trace on another module (result unused); reference: the same forward calling it plainly",
         _seeded(NestedTrace), MLP_IN, eager=_seeded(PlainInnerCall), match_kinds=True, expect=LINEAR,
         weights_free="on meta the forward's own inner tracer.trace refuses (typed, "
                      "meta_state_without_structure_only): there is no plain meta forward to capture"),
)
BY_NAME = {c.name: c for c in CASES}
SECOND_SUBJECT = {"threads": (_seeded(MeetingConv), CONV_IN),  # captured beside the case's own model
                  "processes": (conv, CONV_IN)}
