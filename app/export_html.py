"""`torchlens-explore export-html PATH --out model.html`: the self-contained explorer page, no server."""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Union

import msgspec

from tracer.bounded_io import read_capped
from tracer.errors import InvalidInputError, TracerError


def export_html_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="torchlens-explore export-html",
                                description="Write one HTML file that explores a trace with no server and no network.")
    p.add_argument("path", nargs="?", help="saved trace or config JSON (default: the embedded 8B config)")
    p.add_argument("--out", required=True, help="output file, ending in .html")
    p.add_argument("--model", help="package.module:factory instead of PATH")
    p.add_argument("--input-shape", default="1,8")
    p.add_argument("--title", default=None, help="page title (default: the model class)")
    p.add_argument("--overlay-json", default=None, metavar="FILE",
                   help='a JSON object {"op label or module path": number} added as a user overlay')
    p.add_argument("--follow-symlinks", action="store_true",
                   help="write through --out when it is a symbolic link (refused otherwise)")
    return p


def export_html_main(argv: list[str] | None = None) -> int:
    """Entry point: write the page, print its path, size and time; a refusal prints its code and exits 2."""
    ns = export_html_parser().parse_args(sys.argv[1:] if argv is None else argv)
    try:
        return _export(ns)
    except TracerError as exc:
        print(f"torchlens-explore: refused [{exc.code}]: {exc.message}", file=sys.stderr)
        if exc.remedy:
            print(f"  what to do: {exc.remedy}", file=sys.stderr)
        return 2


def _export(ns: argparse.Namespace) -> int:
    out = Path(ns.out)
    if out.suffix.lower() not in (".html", ".htm"):
        raise InvalidInputError(f"--out {ns.out!r} must end in .html", site="export-html --out",
                                remedy="Name the file model.html.")
    from tracer.atomic_write import resolve_target

    resolve_target(out, follow_symlinks=ns.follow_symlinks, site="export-html --out")  # before any capture
    overlay = _read_overlay(ns.overlay_json) if ns.overlay_json else None
    from exporters.html import write_html

    from .sources import open_source, parse_shape

    started = time.perf_counter()
    loaded = open_source(ns.path, ns.model, parse_shape(ns.input_shape))
    captured = time.perf_counter()
    written = write_html(loaded.trace, out, overlay=overlay, title=ns.title, follow_symlinks=ns.follow_symlinks)
    done = time.perf_counter()
    print(f"torchlens-explore: wrote {written} ({written.stat().st_size / 1e6:.2f} MB; "
          f"capture {captured - started:.1f} s, page {done - captured:.1f} s)")
    return 0


MAX_OVERLAY_BYTES = 64 << 20  # {label: number} for ~10^6 ops; far past any real overlay
OVERLAY_SITE = "export-html --overlay-json"
OVERLAY_REMEDY = 'Pass a JSON object {"op label or module path": number}.'


def _read_overlay(path: str) -> dict:
    """The overlay file's flat JSON object, read with a byte cap from a regular file only; nesting, a
    non-object or a non-number value is refused typed (`invalid_input` or an `input_*` code)."""
    raw = read_capped(path, MAX_OVERLAY_BYTES, site=OVERLAY_SITE, what=f"the overlay file {path}")
    try:
        data = msgspec.json.decode(bytes(raw), type=dict[str, Union[int, float]])
    except (msgspec.ValidationError, msgspec.DecodeError, RecursionError, ValueError) as exc:
        kind = "not a flat object of numbers" if isinstance(exc, msgspec.ValidationError) else "not JSON"
        raise InvalidInputError(f"the overlay file {path} is {kind} ({str(exc)[:200]})", site=OVERLAY_SITE,
                                remedy=OVERLAY_REMEDY) from None
    return data
