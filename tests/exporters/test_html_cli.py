"""`export_html_main`: the console entry the lead wires as `torchlens-explore export-html`."""
from __future__ import annotations

import json

import torch

import tracer
from app.export_html import export_html_main
from tests.models import tiny_gpt2


def test_export_html_from_a_saved_trace_with_a_user_overlay(tmp_path, capsys):
    trace = tracer.trace(tiny_gpt2(), (torch.randint(0, 100, (1, 8)),))
    folder = trace.save(tmp_path / "t")
    (tmp_path / "ov.json").write_text(json.dumps({"transformer.h.0": 5}))
    out = tmp_path / "m.html"
    assert export_html_main([str(folder), "--out", str(out), "--overlay-json", str(tmp_path / "ov.json")]) == 0
    assert out.stat().st_size > 10_000 and "MB" in capsys.readouterr().out


def test_export_html_refuses_a_bad_name_and_a_bad_overlay(tmp_path, capsys):
    assert export_html_main(["gpt2", "--out", str(tmp_path / "m.svg")]) == 2
    (tmp_path / "ov.json").write_text("[1, 2]")
    assert export_html_main(["gpt2", "--out", str(tmp_path / "m.html"), "--overlay-json", str(tmp_path / "ov.json")]) == 2
    assert "refused [invalid_input]" in capsys.readouterr().err
