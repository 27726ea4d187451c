"""docs/errors.md lists every error code, and codes are unique and stable in shape."""
from __future__ import annotations

import pathlib
import re

from tracer import errors
from tracer.errors_doc import import_all_modules as _import_all


def test_codes_unique_and_snake_case():
    _import_all()
    codes = [c.code for c in errors.all_error_classes()]
    assert len(codes) == len(set(codes)), sorted(c for c in codes if codes.count(c) > 1)
    assert all(re.fullmatch(r"[a-z][a-z0-9_]*", c) for c in codes)


def test_docs_list_every_code():
    _import_all()
    doc = (pathlib.Path(__file__).resolve().parents[2] / "docs" / "errors.md").read_text()
    assert doc == errors.errors_markdown(), "regenerate: python -m tracer.errors_doc > docs/errors.md"


def test_error_carries_code_site_remedy_and_findings():
    err = errors.MixedSubstrateError("two substrates", site="model.layers.0", meta=["a"], real=["b"])
    assert err.code == "mixed_substrate" and err.site == "model.layers.0" and err.remedy
    assert err.to_dict()["findings"] == {"meta": ["a"], "real": ["b"]}
    assert "[mixed_substrate]" in str(err) and "remedy:" in str(err)
