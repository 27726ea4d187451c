"""`torchlens-explore diff A B` and `snapshot --diff A B`: two sides (a saved trace, a config or
`--model-a/--model-b module:factory`) opened like the explorer opens one, then `tracer.diff`."""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Sequence

from tracer.errors import InvalidInputError


def diff_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="torchlens-explore diff",
                                description="Compare two traces: structure always, values where both sides saved them.")
    p.add_argument("a", nargs="?", help="side a (the reference): saved trace, config JSON or shipped config name")
    p.add_argument("b", nargs="?", help="side b: saved trace, config JSON or shipped config name")
    p.add_argument("--input-shape", default="1,8", help="input shape for configs and factories (default 1,8)")
    add_side_arguments(p)
    p.add_argument("--max-depth", type=int, default=None, help="tree depth to print (default: all)")
    p.add_argument("--top", type=int, default=10, help="divergent modules listed (default 10)")
    p.add_argument("--json", action="store_true", help="print the diff as JSON instead of text")
    p.add_argument("--save", default=None, metavar="FILE.json", help="also save the diff (tracer.load_diff reads it)")
    return p


def add_side_arguments(p: argparse.ArgumentParser) -> None:
    """The options both diff commands share: factories per side and the tolerance."""
    p.add_argument("--model-a", default=None, help="side a from package.module:factory instead of A")
    p.add_argument("--model-b", default=None, help="side b from package.module:factory instead of B")
    p.add_argument("--rtol", type=float, default=1e-3, help="relative L2 beyond which an op diverges (default 1e-3)")
    p.add_argument("--atol", type=float, default=1e-5, help="max abs difference it must also exceed (default 1e-5)")


def open_sides(a: str | None, b: str | None, model_a: str | None, model_b: str | None, shape_text: str,
               site: str = "diff"):
    """Both sides as `app.sources.Loaded` records; a side needs a path or a factory."""
    from .sources import open_source, parse_shape

    shape = parse_shape(shape_text)
    sides = []
    for name, path, model in (("A", a, model_a), ("B", b, model_b)):
        if not (path or model):
            raise InvalidInputError(f"{site} needs side {name}: a saved trace, a config, or --model-{name.lower()}",
                                    site=f"{site} {name}", remedy="torchlens-explore diff A B (or --model-a/--model-b).")
        sides.append(open_source(path, model, shape))
    return sides


def compute(ns: argparse.Namespace, site: str = "diff"):
    """(loaded a, loaded b, their diff) for parsed diff arguments."""
    import tracer

    left, right = open_sides(ns.a, ns.b, ns.model_a, ns.model_b, ns.input_shape, site)
    result = tracer.diff(left.trace, right.trace, rtol=ns.rtol, atol=ns.atol, describe_a=left.title,
                         describe_b=right.title)
    return left, right, result


def diff_main(argv: Sequence[str]) -> int:
    """Print the diff of two sides (text or JSON); optionally save it."""
    ns = diff_parser().parse_args(list(argv))
    started = time.perf_counter()
    _, _, result = compute(ns)
    if ns.save:
        result.save(ns.save)
    print(result.to_json() if ns.json else result.to_text(max_depth=ns.max_depth, top=ns.top))
    print(f"torchlens-explore: diff in {time.perf_counter() - started:.1f} s"
          + (f"; saved {ns.save}" if ns.save else ""), file=sys.stderr)
    return 0


def snapshot_diff(ns: argparse.Namespace) -> int:
    """`snapshot --diff A B --out fig.svg`: the diff figure, coloured by divergence and captioned."""
    from exporters import figures
    from exporters.diff_figure import diff_scene
    from exporters.layout.hiding import PLUMBING

    out = Path(ns.out)
    fmt = out.suffix.lower().lstrip(".")
    figures.paper_width(ns.width)
    ns.a, ns.b = ns.diff
    left, right, result = compute(ns, site="snapshot --diff")
    hide = PLUMBING if ns.hide is None else tuple(f for f in ns.hide if f != "none")
    caption = False if ns.no_caption else ns.caption
    scene = diff_scene(result, left.trace, right.trace, expanded=None if not ns.expand else ns.expand,
                       fold_repeats=ns.fold, hide=hide, caption=caption)
    size = figures.figure_size(scene, ns.width, ns.max_height, ns.font_pt)
    written = figures.write_scene(scene, out, size, fmt, ns.dpi, follow_symlinks=getattr(ns, "follow_symlinks", False))
    print(f"torchlens-explore: wrote {written}: diff of {left.title} against {right.title}; "
          f"{size.width_in:.2f} x {size.height_in:.2f} in")
    return 0
