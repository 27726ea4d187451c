"""Summary statistics of one tensor, read in chunks so a huge value is never copied whole."""
from __future__ import annotations

import math

import torch

STATS_CHUNK = 1 << 20  # elements widened to float64 at a time


def tensor_stats(value: torch.Tensor, chunk: int = STATS_CHUNK) -> dict[str, float | int]:
    """Mean, std, min, max and L2 norm of the finite elements, the non-finite count and numel.

    Each chunk of `chunk` elements is widened to float64 on its own; means and variances merge
    chunk by chunk (Chan et al.), so the result does not depend on the chunk size.
    """
    flat = value.detach().reshape(-1)
    n, mean, m2, sq = 0, 0.0, 0.0, 0.0
    lo, hi, bad = math.inf, -math.inf, 0
    for start in range(0, flat.numel(), chunk):
        part = flat[start:start + chunk].to("cpu", torch.float64)
        finite = part[part.isfinite()]
        bad += part.numel() - finite.numel()
        k = finite.numel()
        if not k:
            continue
        part_mean = finite.mean().item()
        delta = part_mean - mean
        total = n + k
        mean += delta * k / total
        m2 += ((finite - part_mean) ** 2).sum().item() + delta * delta * n * k / total
        n = total
        sq += (finite * finite).sum().item()
        lo, hi = min(lo, finite.min().item()), max(hi, finite.max().item())
    nan = float("nan")
    return {"mean": mean if n else nan, "std": math.sqrt(m2 / (n - 1)) if n > 1 else 0.0,
            "min": lo if n else nan, "max": hi if n else nan, "norm": math.sqrt(sq),
            "non_finite": int(bad), "numel": int(flat.numel())}
