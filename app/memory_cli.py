"""`torchlens-explore memory-figure CONFIG --out mem.svg`: one training step of a config, weights-free, with
and without activation checkpointing, as a per-layer stacked bar figure (and the table, printed)."""
from __future__ import annotations

import argparse
import time
from pathlib import Path
from typing import Sequence


def memory_figure_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="torchlens-explore memory-figure",
                                description="Per-layer training memory of one step of a model config, weights-free.")
    p.add_argument("path", nargs="?", default="llama-3.1-8b", help="config JSON or shipped config name (default: the 8B)")
    p.add_argument("--out", required=True, help="output figure: .svg or .png")
    p.add_argument("--input-shape", default="1,4096", help="batch,sequence of the step (default 1,4096)")
    p.add_argument("--width", default="page", help="column (3.4 in), page (7 in) or inches (default: page)")
    p.add_argument("--dpi", type=int, default=300, help="PNG resolution (default 300)")
    p.add_argument("--follow-symlinks", action="store_true",
                   help="write through --out when it is a symbolic link (refused otherwise)")
    return p


def memory_figure_main(argv: Sequence[str]) -> int:
    """Capture the step twice (plain, checkpointed) on meta, print the table, write the figure."""
    from tracer.atomic_write import resolve_target

    from .config_check import read_config
    from .sources import parse_shape, resolve_config, token_shape

    ns = memory_figure_parser().parse_args(list(argv))
    started = time.perf_counter()
    resolve_target(Path(ns.out), follow_symlinks=ns.follow_symlinks, site="memory-figure --out")
    shape = token_shape(parse_shape(ns.input_shape))
    config = resolve_config(ns.path)
    read_config(config)  # size, file kind, values and the layer limit (nested configs included), before torch loads
    from exporters.backward_figure import figure_format, write_memory_figure
    from exporters.figures import paper_width
    from tracer.backward.memory import training_step_memory

    paper_width(ns.width)  # refuse a bad width or file name before the captures
    figure_format(ns.out)
    table = training_step_memory(str(config), shape)
    print(table.table())
    written = write_memory_figure(table, Path(ns.out), width=ns.width, dpi=ns.dpi, follow_symlinks=ns.follow_symlinks)
    print(f"torchlens-explore: wrote {written} ({time.perf_counter() - started:.1f} s)")
    return 0
