"""`torchlens-explore`: open a trace, a config or your own model in the browser explorer.

    torchlens-explore                         the embedded Llama-3.1-8B-class config, weights-free
    torchlens-explore PATH                    a saved trace (folder, trace.json or .zip) or a config JSON
    torchlens-explore --model pkg.mod:factory --input-shape 1,8
    torchlens-explore --summary [gpt2]        print the trace summary and exit
    torchlens-explore snapshot PATH --out fig.svg [--width column|page|IN] [--hide FAMILY] [--no-caption] [--direction TB|LR]
    torchlens-explore diff A B [--rtol R] [--json] [--save d.json]   compare two traces (app.diff_cli)
    torchlens-explore snapshot --diff A B --out fig.svg              the diff as a figure coloured by divergence
"""
from __future__ import annotations

import argparse
import os
import signal
import sys
import threading
import time
import webbrowser
from pathlib import Path
from typing import Callable, Sequence

from tracer.errors import TracerError


def _main_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="torchlens-explore", description="Explore a PyTorch model's traced graph in a browser.",
                                epilog="Subcommands: torchlens-explore snapshot PATH --out fig.svg (a paper figure); "
                                       "torchlens-explore export-html PATH --out model.html (one self-contained file).")
    p.add_argument("path", nargs="?", help="saved trace (folder, trace.json, .zip), config JSON, or a shipped config name")
    p.add_argument("--model", help="trace your own model: package.module:factory (a function returning an nn.Module)")
    p.add_argument("--input-shape", default="1,8", help="input shape for --model or a config (default 1,8)")
    p.add_argument("--port", default="0", help="port on 127.0.0.1 (default: a free one)")
    p.add_argument("--allow-host", action="append", default=[], metavar="NAME[:PORT]",
                   help="also answer requests naming this Host (besides 127.0.0.1, localhost, [::1]); repeatable")
    p.add_argument("--training-step", action="store_true",
                   help="a config: capture one training step (forward and backward, weights-free) for the Backward view")
    p.add_argument("--no-browser", action="store_true", help="do not open a browser (servers); the URL is printed")
    p.add_argument("--fresh", action="store_true",
                   help="the embedded default: capture it again instead of reading the start-up cache (app.default_cache)")
    p.add_argument("--summary", nargs="?", const="", default=None, metavar="SOURCE",
                   help="print the trace summary and exit (SOURCE: a shipped config name or path, e.g. gpt2)")
    p.add_argument("--limit", action="append", default=[], metavar="NAME=VALUE",
                   help="raise a declared input limit (see docs/security.md), e.g. --limit layers=4096")
    p.add_argument("--tp", type=int, default=None, metavar="N",
                   help="a config sharded tensor-parallel over N simulated ranks (weights-free, docs/distributed.md)")
    p.add_argument("--fsdp", type=int, default=None, metavar="N", help="FSDP over N simulated ranks (with a config)")
    p.add_argument("--world-size", type=int, default=None, metavar="N", help="simulated world size (default tp x fsdp)")
    return p


def _snapshot_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="torchlens-explore snapshot", description="Write a figure of a trace without a browser.")
    p.add_argument("path", nargs="?", help="saved trace or config JSON (default: the embedded 8B config)")
    p.add_argument("--out", required=True, help="output figure: .svg or .png")
    p.add_argument("--model", help="package.module:factory instead of PATH")
    p.add_argument("--input-shape", default="1,8")
    p.add_argument("--expand", action="append", default=None, metavar="ADDRESS",
                   help="module address to draw expanded (repeatable; default: down to the repeated blocks)")
    p.add_argument("--fold", action=argparse.BooleanOptionalAction, default=True,
                   help="fold runs of repeated blocks into one 'x N' box (default: on)")
    p.add_argument("--hide", action="append", default=None, metavar="FAMILY",
                   help="op family to leave out, repeatable: shape, mask, cast, dropout, cache, norm, or none "
                        "(default: shape, mask, cast, dropout, cache)")
    p.add_argument("--width", default="column", help="column (3.4 in), page (7 in) or inches (default: column)")
    p.add_argument("--max-height", type=float, default=9.0, metavar="INCHES",
                   help="shrink the figure to at most this height (default 9 in: a page)")
    p.add_argument("--font-pt", type=float, default=8.0, help="label size in points, unless width or height forces less")
    p.add_argument("--caption", default=None, metavar="TEXT", help="caption text (default: the ladder state, weights-free only)")
    p.add_argument("--no-caption", action="store_true", help="no caption")
    p.add_argument("--dpi", type=int, default=300, help="PNG resolution (default 300)")
    p.add_argument("--direction", choices=("TB", "LR"), default="TB",
                   help="TB: top to bottom (default); LR: left to right, frame headers up their left side")
    p.add_argument("--follow-symlinks", action="store_true",
                   help="write through --out when it is a symbolic link (refused otherwise)")
    from exporters.overlays import add_overlay_arguments

    add_overlay_arguments(p)
    from .diff_cli import add_side_arguments

    p.add_argument("--diff", nargs=2, default=None, metavar=("A", "B"),
                   help="draw the diff of two sides (saved traces or configs) coloured by divergence")
    add_side_arguments(p)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    """Console entry point; returns the exit status (refusals print a readable message, exit 2)."""
    args = list(sys.argv[1:] if argv is None else argv)
    try:
        if args and args[0] == "snapshot":
            return snapshot(_snapshot_parser().parse_args(args[1:]))
        if args and args[0] == "diff":
            from .diff_cli import diff_main

            return diff_main(args[1:])
        if args and args[0] == "memory-figure":  # issue 14: per-layer training memory
            from .memory_cli import memory_figure_main

            return memory_figure_main(args[1:])
        if args and args[0] == "mcp":  # issue 38: the agent surface over stdio (app.mcp_server)
            from .mcp_server import main as mcp_main

            return mcp_main(args[1:])
        if args and args[0] == "export-html":
            from .export_html import export_html_main

            return export_html_main(args[1:])
        return explore(_main_parser().parse_args(args))
    except TracerError as exc:
        from .startup import refusal_lines

        print("\n".join(refusal_lines(exc)), file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    except Exception as exc:  # a bug, not a refusal: one readable line, no traceback (TLX_DEBUG=1 shows it)
        if os.environ.get("TLX_DEBUG"):
            raise
        from .startup import refusal_lines

        print("\n".join(refusal_lines(exc)), file=sys.stderr)
        return 1


def _load(path: str | None, model: str | None, shape_text: str, mesh: argparse.Namespace | None = None,
          step: Callable[[str], None] | None = None):
    from .sources import Loaded, open_source, parse_shape

    step = step or (lambda key: None)
    if mesh is not None and _meshed(mesh):  # a simulated sharded mesh (tracer.distributed)
        step("import")
        from tracer.distributed import simulate

        step("capture")
        source = path or "llama-3.1-8b"
        tp, fsdp = mesh.tp or 1, mesh.fsdp or 1
        trace = simulate(source, tp=tp, fsdp=fsdp, world_size=mesh.world_size, input_shape=parse_shape(shape_text))
        return Loaded(trace=trace, title=f"{source} (tp {tp} x fsdp {fsdp}, simulated rank 0)", origin="config",
                      source=source, input_shape=parse_shape(shape_text))
    return open_source(path, model, parse_shape(shape_text), step=step)


def _is_default(ns: argparse.Namespace) -> bool:
    """The launch opens the embedded default's forward (the start-up cache's case: app.default_cache)."""
    return not (ns.path or ns.model or ns.training_step or _meshed(ns))


def _meshed(ns: argparse.Namespace) -> bool:
    return bool(getattr(ns, "tp", None) or getattr(ns, "fsdp", None) or getattr(ns, "world_size", None))


def _load_step(ns: argparse.Namespace, step: Callable[[str], None] | None = None):
    """`--training-step`: a config (or the embedded default) captured as one weights-free training step."""
    from .sources import DEFAULT_CONFIG, open_config

    _check_training_step(ns)
    return open_config(ns.path or DEFAULT_CONFIG, ns.input_shape, training_step=True, step=step or (lambda key: None))


def _check_training_step(ns: argparse.Namespace) -> None:
    from tracer.errors import InvalidInputError

    if ns.model:
        raise InvalidInputError("--training-step takes a config, not --model", site="--training-step",
                                remedy="Capture your model with tracer.trace(..., capture=CaptureOptions(backward=True), "
                                       "loss=fn), save it, and open the saved folder.")
    if _meshed(ns):
        raise InvalidInputError("--training-step does not combine with a simulated mesh (--tp/--fsdp/--world-size)",
                                site="--training-step", remedy="Open the training step and the sharded mesh separately.")


def _route(ns: argparse.Namespace) -> str:
    """The start-up route (app.startup.ROUTE_STAGES) once the checks that need no torch pass (refused typed
    otherwise, before any server starts): the input shape, the model spec, the path's kind, a config's values."""
    from .sources import DEFAULT_CONFIG, check_config, check_source, parse_shape

    if ns.training_step:
        _check_training_step(ns)
        check_config(ns.path or DEFAULT_CONFIG, ns.input_shape)
        return "config"
    if _meshed(ns):
        parse_shape(ns.input_shape)
        return "mesh"
    return check_source(ns.path, ns.model, ns.input_shape)


def checked_port(text: str) -> int:
    """The --port value as an int in 0..65535 that is free on 127.0.0.1 right now (0: pick one later)."""
    import socket

    from .errors import PortUnavailableError

    try:
        port = int(text)
    except ValueError:
        raise PortUnavailableError(f"--port {text!r} is not a number", site="--port") from None
    if not 0 <= port <= 65535:
        raise PortUnavailableError(f"--port {port} is outside 0..65535", site="--port")
    if port:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            try:
                sock.bind(("127.0.0.1", port))
            except OSError as exc:
                raise PortUnavailableError(f"port {port} on 127.0.0.1 cannot be used ({exc.strerror})",
                                           site="--port") from None
    return port


REFUSAL_LINGER_S = 15.0  # a refusal found after the server started stays on the page this long, then the command exits


def explore(ns: argparse.Namespace) -> int:
    """Serve the explorer: the page answers at once and shows the start-up stages while the capture runs
    on a background thread (app.startup, app.progress); a refusal found by then is printed, shown on the
    page, and the command exits 2 after `REFUSAL_LINGER_S` (1 for a bug)."""
    from .limits import Limits, set_limits

    set_limits(Limits().with_overrides(ns.limit))
    if ns.summary is not None:
        loaded = _load(ns.summary or ns.path, ns.model, ns.input_shape, ns)
        print(loaded.trace.summary())
        return 0
    port = checked_port(ns.port)
    route = _route(ns)  # refusals that need no capture exit 2 here, before any server
    from .startup import ROUTE_STAGES, Startup, refusal_lines

    default = _is_default(ns)
    if default and not ns.fresh:
        from .default_cache import present
        from .sources import parse_shape

        route = "default-cached" if present(parse_shape(ns.input_shape)) else route  # checked when read
    what = ns.model or ns.path or "the embedded Llama-3.1-8B-class config (weights-free)"
    print(f"torchlens-explore: {'opening' if route == 'default-cached' else 'capturing'} {what} ...", flush=True)
    started = time.perf_counter()
    pools: list = []

    def load(step: Callable[[str], None]):
        if default:
            from .default_cache import open_default
            from .sources import parse_shape

            opened = open_default(parse_shape(ns.input_shape), step, fresh=ns.fresh)
            print(f"torchlens-explore: {opened.note}", flush=True)
            loaded = opened.loaded
        else:
            loaded = _load_step(ns, step) if ns.training_step else _load(ns.path, ns.model, ns.input_shape, ns, step)
        print(f"torchlens-explore: {loaded.title}: {len(loaded.trace.ops):,} ops, {loaded.trace.ladder_state} "
              f"({time.perf_counter() - started:.1f} s)", flush=True)
        step("layout")
        from .explorer import PagePool, PageParts

        pools.append(PagePool(loaded, ready=PageParts(loaded)))  # the first page's parts, built here
        return loaded

    def explorer_page(loaded):
        from .explorer import build_app

        return build_app(loaded, pools[0])

    def done(startup: Startup) -> None:
        if startup.error is not None:
            for line in refusal_lines(startup.error):
                print(line, file=sys.stderr, flush=True)
            if os.environ.get("TLX_DEBUG"):
                import traceback

                traceback.print_exception(startup.error)
            print(f"torchlens-explore: the page shows this; stopping in {REFUSAL_LINGER_S:g} s",
                  file=sys.stderr, flush=True)
            return
        warm = getattr(startup.loaded, "warm", None)  # a cached default builds its meta model now (the Doctor's)
        threading.Timer(3.0, _freeze_when_quiet, args=(warm,)).start()  # after the first page is drawn, not before it

    def ready(url: str) -> None:
        print(f"torchlens-explore: serving on {url}  (Ctrl+C to stop)", flush=True)
        if not ns.no_browser and browser_available():
            threading.Timer(1.0, webbrowser.open, args=(url,)).start()

    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # exit cleanly: temp folders are removed at exit
    from .heap import collect_when_idle
    from .progress import serve_startup

    collect_when_idle()  # what the sessions leave is collected while none of them waits
    startup = Startup(load, ROUTE_STAGES[route])
    try:
        serve_startup(startup, what, explorer_page, port, on_ready=ready, allowed_hosts=ns.allow_host, on_done=done,
                      linger_s=REFUSAL_LINGER_S)
    except OSError as exc:
        from .errors import PortUnavailableError

        raise PortUnavailableError(f"cannot serve on 127.0.0.1:{port} ({exc.strerror or exc})", site="--port") from None
    return startup.exit_code() if startup.done else 0


def _freeze_when_quiet(warm: Callable[[], None] | None = None) -> None:
    """What lives as long as the server is never walked again by a collection on the loop (app.heap);
    `warm()` first, when given: work that lives as long (a cached default's model), done while nobody waits."""
    from . import activity
    from .heap import freeze_long_lived

    activity.wait_until_quiet(10.0)
    if warm is not None:
        warm()
        activity.wait_until_quiet(10.0)
    freeze_long_lived()


def browser_available() -> bool:
    """True where a browser can open: a desktop session (macOS, Windows, or a DISPLAY/Wayland)."""
    if sys.platform in ("darwin", "win32"):
        return True
    if not (os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY")):
        return False
    try:
        webbrowser.get()
    except webbrowser.Error:
        return False
    return True


def snapshot(ns: argparse.Namespace) -> int:
    """Write one figure (SVG or PNG) of a trace, a config or a model; prints its size and timings."""
    started = time.perf_counter()
    out = Path(ns.out)
    fmt = out.suffix.lower().lstrip(".")
    if fmt not in ("svg", "png"):
        from tracer.errors import InvalidInputError

        raise InvalidInputError(f"--out {ns.out!r} must end in .svg or .png", site="snapshot --out",
                                remedy="Name the figure fig.svg (vector, for papers) or fig.png.")
    from tracer.atomic_write import resolve_target

    resolve_target(out, follow_symlinks=ns.follow_symlinks, site="snapshot --out")  # before any capture
    if ns.diff:
        from .diff_cli import snapshot_diff

        return snapshot_diff(ns)
    from .sources import check_source

    check_source(ns.path, ns.model, ns.input_shape)  # the path's kind and a config's values, before torch loads
    from exporters import figure_detail, figures
    from exporters.layout import LayoutEngine
    from exporters.layout.dag import COMPACT
    from exporters.layout.hiding import PLUMBING, hidden_ops

    hide = PLUMBING if ns.hide is None else tuple(f for f in ns.hide if f != "none")
    figures.paper_width(ns.width)  # refuse a bad width before the capture
    loaded = _load(ns.path, ns.model, ns.input_shape)
    captured = time.perf_counter()
    trace = loaded.trace
    options = dict(fold_repeats=ns.fold, caption=False if ns.no_caption else ns.caption, hide=hide,
                   **figures.snapshot_overlay_options(trace, ns.overlay, ns.overlay_scale, ns.rollup))
    engines = {ns.direction: LayoutEngine(trace, hidden_ops(trace, hide), COMPACT, transposed=ns.direction == "LR")}

    def build(expanded: frozenset[str], direction: str = ns.direction) -> figures.Scene:
        if direction not in engines:
            engines[direction] = LayoutEngine(trace, engines[ns.direction].hidden, COMPACT, transposed=direction == "LR")
        return figures.build_scene(trace, expanded=expanded, engine=engines[direction], direction=direction, **options)

    default = engines[ns.direction].default_expansion()
    start = default | set(ns.expand or ())
    detail = figure_detail.choose(build, start, ns.width, ns.max_height, ns.font_pt, adapt=not ns.expand)
    size = detail.size
    floor = figure_detail.floor_pt(ns.font_pt)
    if not figure_detail.reaches(size, floor):  # never write labels under the floor: refuse, saying what would reach it
        raise figure_detail.illegible(size, floor, _small_label_hints(ns, detail, build, start, default, floor),
                                      site=f"snapshot --width {ns.width} --direction {ns.direction}")
    written = figures.write_scene(detail.scene, out, size, fmt, ns.dpi, follow_symlinks=ns.follow_symlinks)
    done = time.perf_counter()
    print(f"torchlens-explore: wrote {written}: {size.width_in:.2f} x {size.height_in:.2f} in, labels {size.font_pt:.1f} pt"
          f"{_snapshot_notes(ns, detail, build, start, default)}; "
          f"{trace.ladder_state}; trace {captured - started:.1f} s, figure {done - captured:.2f} s")
    return 0


def _snapshot_notes(ns: argparse.Namespace, detail, build, start: frozenset[str], default: frozenset[str]) -> str:
    """What `snapshot` opened, closed or grew to suit the print size (the labels reach the floor: see `snapshot`)."""
    from exporters import figures

    notes = []
    if detail.opened:
        notes.append(f"opened {', '.join(detail.opened)} to use the width")
    if detail.closed:
        notes.append(f"closed {', '.join(detail.closed)} to keep labels >= {figures.MIN_FONT_PT:g} pt")
    if detail.opened or detail.closed:
        notes[-1] += " (--expand to choose)"
    elif not ns.expand and figures.paper_width(ns.width) > figures.COLUMN_IN:  # the detail of a column: say why
        room = f"{figures.paper_width(ns.width):g} x {ns.max_height:g} in"
        notes.append(f"no module opens within {room} at {ns.font_pt:g} pt")
    if detail.size.font_pt > ns.font_pt + 0.05:
        notes.append(f"labels grown from {ns.font_pt:g} pt to fill the width")
    return f" ({'; '.join(notes)})" if notes else ""


def _small_label_hints(ns: argparse.Namespace, detail, build, start: frozenset[str], default: frozenset[str],
                       floor: float) -> tuple[str, ...]:
    """The options that would raise `detail`'s labels to `floor` and differ from those given, each with the
    size it gives: a wider `--width` or taller `--max-height`, the other `--direction`, the default detail."""
    from exporters import figure_detail

    def sized(expanded: frozenset[str], direction: str = ns.direction, adapt: bool = not ns.expand):
        return figure_detail.choose(lambda e: build(e, direction), expanded, ns.width, ns.max_height, ns.font_pt,
                                    adapt=adapt).size

    other = "TB" if ns.direction == "LR" else "LR"
    alternatives = {f"--direction {other}": sized(start, other)}
    if ns.expand:
        alternatives["without --expand"] = sized(default, adapt=True)
    return figure_detail.advice(detail.scene, detail.size, ns.width, ns.max_height, alternatives, floor)


if __name__ == "__main__":
    raise SystemExit(main())
