"""docs/errors.md lists every error code of every layer, and codes are unique and stable in shape."""
from __future__ import annotations

import pathlib
import re

from tracer import errors
from tracer.errors_doc import import_all_modules

ROOT = pathlib.Path(__file__).resolve().parents[2]
LAYERS = ("tracer", "exporters", "app")


def _import_all() -> None:
    import_all_modules(LAYERS)


def test_codes_unique_and_snake_case():
    _import_all()
    codes = [c.code for c in errors.all_error_classes()]
    assert len(codes) == len(set(codes)), sorted(c for c in codes if codes.count(c) > 1)
    assert all(re.fullmatch(r"[a-z][a-z0-9_]*", c) for c in codes)


def test_docs_list_every_code():
    _import_all()
    doc = (ROOT / "docs" / "errors.md").read_text()
    assert doc == errors.errors_markdown(), "regenerate: python -m tracer.errors_doc tracer exporters app > docs/errors.md"


def test_every_code_used_in_the_source_is_documented():
    """A `code="..."` passed at a raise (or set on a class) anywhere in the three layers is in docs/errors.md."""
    doc = (ROOT / "docs" / "errors.md").read_text()
    listed = set(re.findall(r"^\| `([a-z0-9_]+)` \|", doc, re.M))
    used = {}
    for layer in LAYERS:
        for path in (ROOT / layer).rglob("*.py"):
            for code in re.findall(r"\bcode\s*=\s*[\"']([a-z][a-z0-9_]*)[\"']", path.read_text()):
                used.setdefault(code, str(path.relative_to(ROOT)))
    assert len(used) >= 40  # the scan sees the classes' own codes too
    missing = {code: where for code, where in used.items() if code not in listed}
    assert not missing, f"codes used but not in docs/errors.md (make them documented classes): {missing}"


def test_error_classes_live_next_to_their_layer():
    _import_all()
    from app import errors as app_errors
    from exporters import errors as exporter_errors

    assert issubclass(exporter_errors.ModelExplorerPayloadError, exporter_errors.ExportError)
    assert issubclass(app_errors.SourceNotFoundError, errors.AdmissionError)
    assert not hasattr(errors, "ExportError") and not hasattr(errors, "SourceNotFoundError")
    families = {c.__module__ for c in errors.all_error_classes()}
    assert families == {"tracer.errors", "exporters.errors", "app.errors"}


def test_error_carries_code_site_remedy_and_findings():
    err = errors.MixedSubstrateError("two substrates", site="model.layers.0", meta=["a"], real=["b"])
    assert err.code == "mixed_substrate" and err.site == "model.layers.0" and err.remedy
    assert err.to_dict()["findings"] == {"meta": ["a"], "real": ["b"]}
    assert "[mixed_substrate]" in str(err) and "remedy:" in str(err)
