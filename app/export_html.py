"""`torchlens-explore export-html PATH --out model.html`: the self-contained explorer page, no server."""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

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
    overlay = _read_overlay(ns.overlay_json) if ns.overlay_json else None
    from exporters.html import write_html

    from .sources import open_source, parse_shape

    started = time.perf_counter()
    loaded = open_source(ns.path, ns.model, parse_shape(ns.input_shape))
    captured = time.perf_counter()
    written = write_html(loaded.trace, out, overlay=overlay, title=ns.title)
    done = time.perf_counter()
    print(f"torchlens-explore: wrote {written} ({written.stat().st_size / 1e6:.2f} MB; "
          f"capture {captured - started:.1f} s, page {done - captured:.1f} s)")
    return 0


def _read_overlay(path: str) -> dict:
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise InvalidInputError(f"cannot read the overlay file {path}: {exc}", site="export-html --overlay-json",
                                remedy='Pass a JSON object {"op label or module path": number}.') from exc
    if not isinstance(data, dict):
        raise InvalidInputError(f"the overlay file {path} holds {type(data).__name__}, not an object",
                                site="export-html --overlay-json",
                                remedy='Pass a JSON object {"op label or module path": number}.')
    return data
