"""What a real training step saves for the backward, beside the weights-free estimate, per attention backend.

Run: `python tests/bench/bench_sdpa_saved_bytes.py [cuda|cpu]`. A 2-layer Llama (hidden 64, 4 heads,
1x16 tokens, no mask: sdpa on meta refuses a mask it would read) in float32 and bfloat16, eager and
sdpa attention: the saved bytes of a real step on the device, the estimate of the same step on meta
(where sdpa takes torch's math path), the autograd node counts, and which fused attention kernel the
real step took (its backward node's name).
"""
from __future__ import annotations

import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

import tracer  # noqa: E402
from tests.gpu.test_cuda_paths import _llama  # noqa: E402
from tracer.backward.memory import training_memory  # noqa: E402
from tracer.options import CaptureOptions  # noqa: E402

_FUSED = ("ttention", "Flash", "Efficient", "Cudnn")


def main() -> None:
    device = sys.argv[1] if len(sys.argv) > 1 else ("cuda" if torch.cuda.is_available() else "cpu")
    loss = lambda o: o.logits.sum()  # noqa: E731
    print(f"torch {torch.__version__}, {torch.cuda.get_device_name() if device == 'cuda' else 'cpu'}")
    print("| attention | dtype | real saved (B) | estimate (B) | nodes real / estimate | fused kernel |")
    print("|---|---|---|---|---|---|")
    for attn in ("eager", "sdpa"):
        for dtype in (torch.float32, torch.bfloat16):
            model, args, _ = _llama(device, attn)
            real = tracer.trace(model.to(dtype), args, {}, capture=CaptureOptions(backward=True), loss=loss)
            meta, margs, _ = _llama("meta", attn)
            est = tracer.trace(meta.to(dtype), margs, {}, capture=CaptureOptions(structure_only=True, backward=True),
                               loss=loss)
            fused = sorted({n.name for n in real.backward.nodes if any(w in n.name for w in _FUSED)})
            print(f"| {attn} | {str(dtype).replace('torch.', '')} | {training_memory(real).total_saved_bytes:,} | "
                  f"{training_memory(est).total_saved_bytes:,} | {len(real.backward.nodes)} / "
                  f"{len(est.backward.nodes)} | {', '.join(fused) or '-'} |")


if __name__ == "__main__":
    main()
